"""Configuration validation and sweep enumeration."""

from pathlib import Path

import pytest

from trainingcost.analytic import cost_model_names, rule_names
from trainingcost.analytic.memory import DTYPE_BYTES, OPTIMIZER_SLOTS
from trainingcost.analytic import vocabulary
from trainingcost.config import (
    ConfigError,
    canonical_model,
    config_id,
    preset_entry,
    schema_enum,
    sweep_frame,
)
from trainingcost.config import validate_config as validate_with
from trainingcost.config.presets import PRESETS
from trainingcost.config.model import LATE_OPTIONS
from trainingcost.config.sweep import CONFIG_COLUMNS

ROOT = Path(__file__).resolve().parents[1]


def validate_config(config):
    return validate_with(config, vocabulary())

GRID = dict(
    arch=["encoder", "decoder", "encoder-decoder"],
    d_model=[64, 128],
    heads=[4],
    ff_mult=[4],
    layers=[1, 2, 4],
    seq_len=[32, 128],
    tgt_len=[16],
    vocab=[256],
)


def test_schema_enums_match_the_code():
    assert schema_enum("rule", vocabulary()) == rule_names()
    assert schema_enum("cost_model", vocabulary()) == cost_model_names()
    assert schema_enum("preset") == tuple(PRESETS)
    assert set(schema_enum("dtype")) == set(DTYPE_BYTES)
    assert set(schema_enum("optimizer")) == set(OPTIMIZER_SLOTS)


def test_config_id_is_stable_and_canonical():
    paper = canonical_model(preset_entry("paper-example"), "p")
    assert config_id(paper) == "b0a1b5c74f"  # changing it breaks every stored result path
    same = canonical_model(dict(arch="encoder", layers=1, d_model=512, heads=8, ff_mult=4, vocab=37000, seq_len=512, batch=1), "q")
    assert config_id(same) == config_id(paper)
    assert config_id(paper.replace(batch=2)) != config_id(paper)


def test_grid_union_presets_and_models():
    config = validate_config(
        {
            "sweep": {
                "presets": ["bert-base", "gpt2-small"],
                "grids": [GRID],
                "models": [dict(name="dup", arch="encoder", layers=1, d_model=64, heads=4, d_ff=256, vocab=256, seq_len=32)],
            }
        }
    )
    frame = sweep_frame(config)
    # the later options' columns only where a row sets one (none here): the frames of before keep their bytes
    assert list(frame.columns) == [c for c in CONFIG_COLUMNS if c not in LATE_OPTIONS]
    assert len(frame) == 2 + 3 * 2 * 3 * 2  # the explicit model duplicates a grid point
    assert frame.config_id.is_unique
    encdec = frame[frame.arch == "encoder-decoder"]
    assert (encdec.tgt_len == 16).all() and (encdec.enc_layers == encdec.dec_layers).all()
    others = frame[frame.arch != "encoder-decoder"]
    assert (others.tgt_len == others.seq_len).all()  # tgt_len does not apply: dropped
    assert (frame[frame.arch == "decoder"].enc_layers == 0).all()
    # Defaults are filled in.
    assert config["analytic"]["rules"] == list(rule_names())
    assert (frame.batch == 1).all()


def test_ff_mult_and_batch_default():
    c = canonical_model(dict(arch="decoder", layers=2, d_model=48, heads=3, ff_mult=3, vocab=9, seq_len=5), "m")
    assert c.d_ff == 144 and c.batch == 1 and c.classes == 0


BAD = [
    ({"sweep": {"models": [dict(arch="encoder", layers=1, d_model=64, heads=5, d_ff=8, vocab=9, seq_len=4)]}}, "sweep.models[0].heads: 5 does not divide d_model 64"),
    ({"sweep": {"models": [dict(arch="encoder", layers=0, d_model=64, heads=4, d_ff=8, vocab=9, seq_len=4)]}}, "sweep.models[0].layers"),
    ({"sweep": {"models": [dict(arch="encoder", layers=1, d_model=-64, heads=4, d_ff=8, vocab=9, seq_len=4)]}}, "sweep.models[0].d_model"),
    ({"sweep": {"models": [dict(arch="rnn", layers=1, d_model=64, heads=4, d_ff=8, vocab=9, seq_len=4)]}}, "sweep.models[0].arch: 'rnn' is not allowed (allowed: encoder, decoder, encoder-decoder)"),
    ({"sweep": {"models": [dict(arch="encoder-decoder", enc_layers=2, d_model=64, heads=4, d_ff=8, vocab=9, seq_len=4)]}}, "sweep.models[0].dec_layers: encoder-decoder needs both stacks"),
    ({"sweep": {"models": [dict(arch="encoder", layerz=1, d_model=64, heads=4, d_ff=8, vocab=9, seq_len=4)]}}, "unknown key 'layerz'"),
    ({"sweep": {"models": [dict(arch="encoder", layers="two", d_model=64, heads=4, d_ff=8, vocab=9, seq_len=4)]}}, "sweep.models[0].layers: 'two' is not of type 'integer'"),
    ({"sweep": {"presets": ["gpt5"]}}, "sweep.presets[0]: 'gpt5' is not allowed (allowed: paper-example"),
    ({"sweep": {"presets": ["bert-base"]}, "analytic": {"rules": ["bp", "sgd"]}}, "analytic.rules[1]: 'sgd' is not allowed (allowed: bp, pepita"),
    ({"sweep": {"presets": ["bert-base"]}, "analytic": {"cost_models": ["chinchilla"]}}, "analytic.cost_models[0]: 'chinchilla' is not allowed"),
    ({"sweep": {"grids": [{**GRID, "heads": [3]}]}}, "sweep.grids[0].heads: 3 does not divide d_model 64"),
    ({"sweep": {"grids": [{**GRID, "d_model": 64}]}}, "sweep.grids[0].d_model: 64 is not of type 'array'"),
    ({"sweep": {}}, "sweep: no configurations"),
    ({"sweeps": {}}, "unknown key 'sweeps'"),
]


@pytest.mark.parametrize("config,message", BAD, ids=[m[:40] for _, m in BAD])
def test_bad_configs_name_the_field(config, message):
    with pytest.raises(ConfigError) as info:
        validate_config(config)
    text = str(info.value)
    assert message in text
    assert "\n" not in text


def test_a_later_option_has_its_column_where_a_row_sets_it():
    from trainingcost.config import canonical_model, configs_frame
    from trainingcost.config.sweep import frame_configs

    plain = canonical_model(dict(arch="decoder", layers=1, d_model=16, heads=2, d_ff=32, vocab=40, seq_len=8))
    window = plain.replace(sliding_window=4, positions="rotary")
    frame = configs_frame([("a", plain), ("b", window)])
    assert "sliding_window" in frame and not set(LATE_OPTIONS) - {"sliding_window"} & set(frame.columns)
    assert frame_configs(frame) == [plain, window]
    assert frame_configs(configs_frame([("a", plain)])) == [plain]


def test_numbers_in_scientific_notation_are_numbers_and_a_key_given_twice_is_refused(tmp_path, capsys):
    """Issue 40, defects 12 and 20: YAML 1.1 reads `lr: 1e-3` and `tokens: 1e10` as strings (a float needs a dot);
    they are numbers as users write them. A key given twice was kept silently (the last); now one line names it."""
    import yaml

    from trainingcost import cli

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["train"]["lr"] = "1e-3"
    config["plan"]["tokens"] = "1e10"
    path = tmp_path / "scientific.yaml"
    path.write_text(yaml.safe_dump(config))
    assert "lr: 1e-3" in path.read_text()  # written as a user writes it, unquoted
    assert cli.main(["check", "--config", str(path)]) == 0, capsys.readouterr().err
    twice = tmp_path / "twice.yaml"
    twice.write_text(path.read_text().replace("lr: 1e-3", "lr: 1e-3\n  lr: 0.2"))
    assert cli.main(["check", "--config", str(twice)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lr: given twice in one mapping" in err
