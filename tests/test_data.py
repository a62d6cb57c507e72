"""Tasks: seeded, split, and with the targets they promise."""

import torch

from trainingcost.config import canonical_model
from trainingcost.train.data import BOS_ID, MARKER_A, MARKER_B, MASK_ID, make_task, stdlib_corpus
from trainingcost.train.objective import IGNORE


def cfg(**kw):
    base = dict(arch="decoder", layers=1, d_model=16, heads=2, d_ff=32, vocab=256, seq_len=12, batch=64)
    return canonical_model({**base, **kw}, "")


def test_default_corpus_is_the_standard_library():
    text = stdlib_corpus(limit=100_000)
    assert len(text) == 100_000 and b"def " in text and b"import" in text


def test_lm_decoder_targets_are_the_next_bytes(tmp_path):
    corpus = tmp_path / "t.txt"
    corpus.write_bytes(bytes(range(1, 201)) * 5)
    task = make_task("lm", cfg(), str(corpus))
    batch = task.batch(torch.Generator().manual_seed(0))
    x, y = batch.tokens["decoder"], batch.targets
    assert x.shape == y.shape == (64, 12)
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert torch.equal((x % 200) + 1, y)  # in this text every byte is followed by its successor
    # validation windows come from the last 10 % of the text only
    val = task.validation(seed=0, batches=2)
    assert len(val) == 2 and all(b.targets.shape == (64, 12) for b in val)


def test_lm_encoder_masks_and_predicts_the_masked_bytes():
    task = make_task("lm", cfg(arch="encoder"))
    batch = task.batch(torch.Generator().manual_seed(1))
    x, y = batch.tokens["encoder"], batch.targets
    masked = y != IGNORE
    assert torch.all(x[masked] == MASK_ID) and torch.all(x[~masked] != MASK_ID)
    assert 0.10 < masked.float().mean() < 0.20


def test_lm_encoder_decoder_predicts_the_continuation():
    task = make_task("lm", cfg(arch="encoder-decoder", layers=1, tgt_len=5))
    batch = task.batch(torch.Generator().manual_seed(2))
    assert batch.tokens["encoder"].shape == (64, 12) and batch.targets.shape == (64, 5)
    assert torch.equal(batch.tokens["decoder"][:, 1:], batch.targets[:, :-1])
    assert torch.all(batch.tokens["decoder"][:, 0] == BOS_ID)


def test_classify_labels_count_the_markers():
    task = make_task("classify", cfg(arch="encoder", vocab=10, classes=3, seq_len=20))
    batch = task.batch(torch.Generator().manual_seed(3))
    tokens, labels = batch.tokens["encoder"], batch.targets
    a, b = (tokens == MARKER_A).sum(1), (tokens == MARKER_B).sum(1)
    expected = torch.where(a > b, 0, torch.where(a < b, 1, 2))
    assert torch.equal(labels, expected)
    assert set(labels.tolist()) == {0, 1, 2}
    assert (a + b).max() < 20


def test_copy_and_reverse_targets():
    c = cfg(arch="encoder-decoder", vocab=30, seq_len=7, tgt_len=7)
    for name, flip in (("copy", False), ("reverse", True)):
        batch = make_task(name, c).batch(torch.Generator().manual_seed(4))
        source = batch.tokens["encoder"]
        assert torch.equal(batch.targets, source.flip(1) if flip else source)
        assert torch.equal(batch.tokens["decoder"][:, 1:], batch.targets[:, :-1])


def test_batches_are_seeded():
    task = make_task("classify", cfg(arch="encoder", vocab=10, classes=3))
    one = task.batch(torch.Generator().manual_seed(5))
    two = task.batch(torch.Generator().manual_seed(5))
    assert torch.equal(one.tokens["encoder"], two.tokens["encoder"]) and torch.equal(one.targets, two.targets)
