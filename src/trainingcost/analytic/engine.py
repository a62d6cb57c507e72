"""The analytic engine: a registry of (cost model, layer kind) -> formula, and
the composition of formulas into each learning rule's phases.

A formula returns *quantities* for one layer kind, per sequence, each a pair of
MACC and FLOP arrays:

- ``forward``: one forward pass;
- ``backward``: input-gradient work that stays inside the block;
- ``backward_q`` / ``backward_kv``: attention input gradients towards the query
  input and the key/value input;
- ``backward_skip``: adding a residual branch's gradient at the sublayer input;
- ``weight_grad``: the weight gradient (the paper's "weight update");
- ``weight_grad_dense``: the embedding's dense update that only PEPITA pays;
- ``linear_forward`` / ``linear_weight_grad``: the products with weight matrices
  alone (what a feedback matrix update or a weight-mirror pass repeats);
- ``error_projection``: PEPITA's projection of the output error onto the input;
- ``dfa_projection``: DFA's projection of the output error onto a block;
- ``forward_modulated``: a forward pass that stops before the head (the
  ``executed`` model's PEPITA modulated pass and MEMPEPITA recomputation);
- ``feedback_copy``: KP's feedback gradient when it is a copy of W's (no product);
- ``target_projection``: TP's, DTP's and LRA's product carrying a block's target to the unit below;
  ``feedback_forward`` / ``feedback_weight_grad``: their inverse's forward and gradient (TP, DTP) or the error
  weights' gradient (LRA); ``head_projection`` / ``head_feedback_copy``: LRA's error weights at the head;
- derived here: ``backward_total``, ``backward_dfa`` (the backward inside blocks), ``forward_unit`` (the
  blocks' forward, TP's and DTP's noisy pass) and ``backward_local`` (DFA's backward without the head's: LRA).

A quantity may carry a third number, the *elementwise* FLOPs that the FLOP
count leaves out (bias additions, softmax, GELU, LayerNorm ...); only cost
models whose FLOPs are matmul-only (``executed``) declare it.

A rule's *recipe* (``RuleSpec.recipe`` in ``rules/<name>/__init__.py``) says
which quantities, with which multiplicity, make each of its phases; Table 2 of
the paper is the recipe of BP, PEPITA and MEMPEPITA. A layer appears in a
phase when its formula declares one of the phase's quantities, so adding a
layer kind or a cost model touches one registry entry per formula, and adding
a rule touches its own folder.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from . import layers as L
from . import templates as T
from .catalogue import rule, rule_names
from .registry import CostModel, cost_model, cost_model_names
from .templates import Shapes, Templates
from ..config.errors import SizeOverflowError

PHASES = ("forward", "backward", "error_projection", "target_propagation", "weight_update", "feedback_update", "mirror")
INT64_LIMIT = float(2**63 - 1)
EXACT_FLOAT = float(2**50)  # float64 holds every integer below 2**53; the margin covers a formula's intermediates


def recipe(rule_name: str, mirror_steps: int = 1, cost_model_name: str | None = None) -> dict[str, list[tuple[str, int]]]:
    """The phases of ``rule_name`` as (quantity, multiplicity) lists, under ``cost_model_name``'s overrides."""
    recipes = cost_model(cost_model_name).recipes if cost_model_name is not None else None
    return rule(rule_name).recipe_for(recipes, {"mirror_steps": mirror_steps})


# ---------------------------------------------------------------------------
# Evaluation


@dataclass
class Quantities:
    """Per-template MACCs, FLOPs and elementwise FLOPs (per batch) and where each quantity is declared.

    ``elementwise`` is None for cost models that fold elementwise work into their FLOPs.
    """

    cost_model: str
    templates: Templates
    maccs: dict[str, np.ndarray]
    flops: dict[str, np.ndarray]
    declared: dict[str, np.ndarray]
    elementwise: dict[str, np.ndarray] | None = None
    exact: dict[str, dict[str, np.ndarray]] | None = None  # the float64 values behind ``maccs``/``flops`` (exact)
    written: dict[str, list[slice]] | None = None  # the template rows each quantity may be nonzero on
    # the configurations too large for exact floats: (their indices, their template rows here, their Quantities in int64)
    large: tuple | None = None
    lazy: bool = False  # the derived quantities (DERIVED) are not stored (evaluate's derive False)


class ExactInts(dict):
    """Float64 arrays of exact integers (every value below EXACT_FLOAT), read as int64 arrays: each converted
    once, when first read (the per-configuration totals read the floats themselves and convert only their sums)."""

    def __init__(self, floats: dict[str, np.ndarray], rows: np.ndarray | None = None, large: dict | None = None):
        super().__init__(floats)
        self.floats, self.rows, self.large = floats, rows, large  # large: int64 values of ``rows`` (too large for floats)
        self._ints: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._ints:
            ints = self.floats[name].astype(np.int64)
            if self.rows is not None and len(self.rows):
                ints[self.rows] = self.large[name] if name in self.large else 0
            self._ints[name] = ints
        return self._ints[name]

    def get(self, name: str, default=None):
        return self[name] if name in self.floats else default

    def values(self):
        return [self[name] for name in self.floats]

    def items(self):
        return [(name, self[name]) for name in self.floats]


BACKWARD_PARTS = ("backward", "backward_q", "backward_kv", "backward_skip")
DERIVED = ("backward_total", "backward_dfa", "forward_unit", "backward_local")


def _derive_backward(q: dict, declared: dict, block_entry: np.ndarray, kv_entry: np.ndarray, n: int) -> None:
    """The backward of BP (everything) and of DFA (what stays inside the block).

    DFA drops the key/value gradient of every attention whose keys and values read
    a block input or the encoder output, and the query and skip gradients of the
    sublayers whose residual input is the block input.
    """
    zero = np.zeros(n, dtype=np.int64)
    for store in q.values():
        part = {k: store.get(k, zero) for k in BACKWARD_PARTS}
        store["backward_total"] = part["backward"] + part["backward_q"] + part["backward_kv"] + part["backward_skip"]
        store["backward_dfa"] = (part["backward"] + np.where(block_entry, 0, part["backward_q"] + part["backward_skip"])
                                 + np.where(kv_entry, 0, part["backward_kv"]))
    any_part = np.zeros(n, dtype=bool)
    for k in BACKWARD_PARTS:
        any_part |= declared.get(k, np.zeros(n, dtype=bool))
    declared["backward_total"] = any_part
    declared["backward_dfa"] = any_part


def _derive_units(q: dict, declared: dict, templates: Templates) -> None:
    """What TP, DTP and LRA run on their units (blocks; a pre-LN stack's final norm belongs to its last):

    - ``forward_unit``: the forward of the blocks and final norms, not of the embeddings and the head
      (TP's and DTP's noisy forward of every block, to train its inverse);
    - ``backward_local``: DFA's backward without the head's (LRA's loss backward stops at the head's
      weights: the error reaches the top unit through E_head, not through W_head).
    A model-granularity cost model (one row, ``model``) has no blocks to tell apart: its forward and backward.
    """
    n = len(templates)
    unit = templates.is_block | (templates.rank % 1000 >= T.TAIL_RANK)
    head = np.zeros(n, dtype=bool)
    for kind in L.HEAD_KINDS:
        if kind in templates.kind_slices:
            head[templates.kind_slices[kind]] = True
    whole = "model" in templates.kind_slices
    for store in q.values():
        if "forward" in store:
            store["forward_unit"] = store["forward"] if whole else np.where(unit, store["forward"], 0)
        if "backward_dfa" in store:
            store["backward_local"] = np.where(head, 0, store["backward_dfa"])
    if "forward" in declared:
        declared["forward_unit"] = declared["forward"] if whole else declared["forward"] & unit
    if "backward_dfa" in declared:
        declared["backward_local"] = declared["backward_dfa"] & ~head


def _evaluate_formulas(model: CostModel, templates: Templates, dtype, written: dict | None = None, memo: bool = False
                       ) -> tuple[dict, dict, dict, dict]:
    """Every formula of ``model`` on its kinds' rows, per batch, in ``dtype``; ``written`` (if given) collects the
    rows (kind slices) each quantity was written on."""
    n = len(templates)
    maccs: dict[str, np.ndarray] = {}
    flops: dict[str, np.ndarray] = {}
    elementwise: dict[str, np.ndarray] = {}
    declared: dict[str, np.ndarray] = {}
    # A formula that the previous cost model evaluated on these templates (``causal`` shares all but one of
    # ``executed``'s) is not evaluated again: its quantities are kept per kind until the next model is done.
    previous = _FORMULA_MEMO.get(id(templates), (None, {}))[1] if memo else {}
    current = {}
    for kind, index in sorted(templates.kind_index().items()):
        formula = model.formulas.get(kind)
        if formula is None:  # a cost model that leaves a kind out prices it at nothing (docs/extending.md)
            continue
        shapes = Shapes(templates, index, dtype=dtype)
        key = (formula, kind, np.dtype(dtype).str)
        results = previous[key] if key in previous else formula(shapes)
        current[key] = results
        for name, values in results.items():
            if written is not None:
                written.setdefault(name, []).append(index)
            where = values[3] if len(values) == 4 else True
            for store, value in zip((maccs, flops, elementwise), values[:3]):
                if value is None:
                    continue
                if name not in store:
                    store[name] = np.zeros(n, dtype=dtype)
                np.multiply(value, shapes.B, out=store[name][index])
            if name not in declared:
                declared[name] = np.zeros(n, dtype=bool)
            declared[name][index] = where
    if memo:
        _FORMULA_MEMO.clear()  # one model's results at a time, for the templates they were computed on
        _FORMULA_MEMO[id(templates)] = (templates, current)
    return maccs, flops, elementwise, declared


def _formula_pieces(model: CostModel, templates: Templates, memo: bool = False) -> tuple[dict, dict]:
    """Every formula of ``model`` on its kinds' rows, in float64, per *sequence*, kept where it was computed:
    {store: {quantity: [(kind rows, values), ...]}} (no array over every template per quantity, no product
    with the batch: the per-configuration totals weigh each row by its batch and count), and where each
    quantity is declared. A quantity's names appear in each store in :func:`_evaluate_formulas`'s order."""
    n = len(templates)
    pieces: dict[str, dict[str, list]] = {"maccs": {}, "flops": {}, "elementwise": {}}
    declared: dict[str, np.ndarray] = {}
    dtype = np.float64
    previous = _FORMULA_MEMO.get(id(templates), (None, {}))[1] if memo else {}
    current = {}
    for kind, index in sorted(templates.kind_index().items()):
        formula = model.formulas.get(kind)
        if formula is None:
            continue
        shapes = Shapes(templates, index, dtype=dtype)
        key = (formula, kind, np.dtype(dtype).str)
        results = previous[key] if key in previous else formula(shapes)
        current[key] = results
        for name, values in results.items():
            where = values[3] if len(values) == 4 else True
            for store, value in zip(pieces.values(), values[:3]):
                if value is None:
                    continue
                found = store.setdefault(name, [])
                if np.ndim(value) == 0 and value == 0:  # zero on these rows
                    continue
                found.append((index, np.broadcast_to(np.asarray(value, dtype=dtype), (len(shapes),))))
            if name not in declared:
                declared[name] = np.zeros(n, dtype=bool)
            declared[name][index] = where
    if memo:
        _FORMULA_MEMO.clear()
        _FORMULA_MEMO[id(templates)] = (templates, current)
    return pieces, declared


def _pieces_total(templates: Templates, stores, n: int) -> np.ndarray | None:
    """:func:`_total_per_config` of quantities given as pieces per sequence (None: no quantity), the same floats:
    |v x B| is |v| x B, summed over the same rows in the same order."""
    if not any(stores):
        return None
    batch = templates.shape_column("B", np.float64)
    rows = np.zeros(len(templates), dtype=np.float64)
    for store in stores:
        for found in store.values():
            for index, values in found:
                rows[index] += np.abs(values) * batch[index]
    return np.bincount(templates.cfg, weights=rows * _float_count(templates), minlength=n)


_FORMULA_MEMO: dict[int, tuple] = {}  # id(templates) -> (the templates, kept alive; {(formula, kind, dtype): quantities})


def evaluate(cost_model_name: str, configs: pd.DataFrame, mirror_steps: int = 1,
             templates: Templates | None = None, floats: bool = True, derive: bool = True, memo: bool = False
             ) -> Quantities:
    """Evaluate every formula of ``cost_model_name`` on every configuration, per batch
    (on ``templates`` when the caller has built them for the model's granularity). ``floats`` False: in int64."""
    model = cost_model(cost_model_name)
    templates = templates if templates is not None else build_for(model, configs)
    if not floats:
        maccs, flops, elementwise, declared = _evaluate_formulas(model, templates, np.int64)
        _refuse_overflow(model, configs, templates, _float_values(model, templates), mirror_steps)
        q = {"maccs": maccs, "flops": flops, **({"elementwise": elementwise} if elementwise else {})}
        _derive_backward(q, declared, templates.block_entry, templates.kv_entry, len(templates))
        _derive_units(q, declared, templates)
        return Quantities(cost_model_name, templates, maccs, flops, declared, q.get("elementwise"))
    # The polynomials in floating point reveal any int64 overflow; below EXACT_FLOAT every value, and every
    # intermediate of a formula (integer products, sums and halvings within a few times the result), is an integer
    # that float64 holds exactly, so the exact int64 values are those floats: one evaluation, not two.
    written: dict[str, list[slice]] = {}
    maccs, flops, elementwise, declared = _evaluate_formulas(model, templates, np.float64, written, memo=memo)
    worst = _refuse_overflow(model, configs, templates, [(flops, written), (elementwise, written)], mirror_steps)
    q = {"maccs": maccs, "flops": flops, **({"elementwise": elementwise} if elementwise else {})}
    # derive False: the derived quantities are not stored (a caller sums them part by part from theirs)
    _derive_backward(q if derive else {}, declared, templates.block_entry, templates.kv_entry, len(templates))
    _derive_units(q if derive else {}, declared, templates)
    for derived, parts in (("backward_total", BACKWARD_PARTS), ("backward_dfa", BACKWARD_PARTS),
                           ("forward_unit", ("forward",)), ("backward_local", BACKWARD_PARTS)):
        written[derived] = [index for part in parts for index in written.get(part, [])]
    # Configurations whose sum reaches EXACT_FLOAT (few, and large) are evaluated again alone, in int64.
    large, rows = None, None
    large_cfg, alone = _large(model, configs, templates, worst, mirror_steps)
    if alone is not None:
        # the rows of the same (layer, configuration) here, in the order of the subset's rows
        here = {(templates.labels[templates.part[r]], int(templates.cfg[r])): r
                for r in np.flatnonzero(_config_mask(len(configs), large_cfg)[templates.cfg])}
        a = alone.templates
        rows = np.array([here[(a.labels[a.part[r]], int(large_cfg[a.cfg[r]]))] for r in range(len(a))], dtype=np.int64)
        assert len(rows) == len(here), "a subset's templates differ from the whole's"
        large = (large_cfg, rows, alone)
    stores = [ExactInts(store, rows, getattr(large[2], name) if large else None) if store is not None else None
              for name, store in (("maccs", maccs), ("flops", flops), ("elementwise", q.get("elementwise")))]
    return Quantities(cost_model_name, templates, *stores[:2], declared, stores[2],
                      {"maccs": maccs, "flops": flops, "elementwise": q.get("elementwise") or {}}, written, large,
                      not derive)


def _large(model: CostModel, configs: pd.DataFrame, templates: Templates, worst: np.ndarray | None,
           mirror_steps: int) -> tuple[np.ndarray, Quantities | None]:
    """The configurations whose sum reaches EXACT_FLOAT (few, and large), and their Quantities evaluated alone,
    in int64 (None where there are none)."""
    large_cfg = np.flatnonzero(worst >= EXACT_FLOAT) if worst is not None else np.zeros(0, dtype=np.int64)
    if not len(large_cfg):
        return large_cfg, None
    subset = configs.iloc[large_cfg].reset_index(drop=True)
    # the subset's columns and options are the whole's rows (option_columns reads each row alone)
    columns = {name: values[large_cfg] for name, values in templates.config_columns.items()}
    return large_cfg, evaluate(model.name, subset, mirror_steps, build_for(model, subset, columns), floats=False)


def _config_mask(n: int, chosen: np.ndarray) -> np.ndarray:
    """A bool array of n configurations, true at ``chosen``."""
    mask = np.zeros(n, dtype=bool)
    mask[chosen] = True
    return mask


def _float_values(model: CostModel, templates: Templates) -> list[np.ndarray]:
    """Every quantity of ``model`` on ``templates``, in float64 (where int64 would wrap, floats only round)."""
    _, flops, elementwise, _ = _evaluate_formulas(model, templates, np.float64)
    return [*flops.values(), *elementwise.values()]


def _headroom(mirror_steps: int) -> int:
    """How many times a phase may add its largest quantity (the backward is twice the forward; WM mirrors)."""
    return max(3, 2 * mirror_steps)


def _total_per_config(templates: Templates, values, n: int) -> np.ndarray:
    """Per configuration, the sum over its layer instances of every quantity: a bound on any phase's total / headroom.
    ``values``: float arrays, or (store, written) pairs whose quantities are nonzero only on their written rows."""
    weight = _float_count(templates)
    if all(isinstance(v, np.ndarray) for v in values):
        return sum(np.bincount(templates.cfg, weights=np.abs(v) * weight, minlength=n) for v in values)
    rows = np.zeros(len(templates), dtype=np.float64)
    for store, written in values:
        for name, v in store.items():
            for index in written.get(name, [slice(None)]):
                rows[index] += np.abs(v[index])
    return np.bincount(templates.cfg, weights=rows * weight, minlength=n)


def _refuse_overflow(model: CostModel, configs: pd.DataFrame, templates: Templates, values,
                     mirror_steps: int) -> np.ndarray | None:
    """Refuse the configurations whose costs leave exact int64; else each configuration's total (None: nothing)."""
    if not values or all(isinstance(v, tuple) and not v[0] for v in values):
        return None
    return _refuse_worst(model, configs, _total_per_config(templates, values, len(configs)), mirror_steps)


def _refuse_worst(model: CostModel, configs: pd.DataFrame, worst: np.ndarray, mirror_steps: int) -> np.ndarray:
    """Refuse the configurations whose total ``worst`` (:func:`_total_per_config`) leaves exact int64; else it."""
    if worst.max() * _headroom(mirror_steps) < INT64_LIMIT:
        return worst
    i = int(np.argmax(worst))
    error = SizeOverflowError(overflow_message(model, configs.iloc[[i]].reset_index(drop=True), float(worst[i]) * _headroom(mirror_steps)))
    error.config_name = str(configs["name"].iloc[i]) if "name" in configs else ""
    raise error


def overflow_message(model: CostModel, row: pd.DataFrame, reach: float) -> str:
    """Which size fields of the one-row frame ``row`` make its costs overflow, and how.

    Each size is halved in turn: the factor by which the step's cost falls gives the size's degree
    in it (d_model enters squared, batch linearly), and degree x log2(size) its share of the total.
    The fields named are those with at least half the largest share.
    """
    from ..config.model import SIZE_FIELDS

    encdec = row.at[0, "arch"] == "encoder-decoder"
    tied = {} if encdec else {"seq_len": ("seq_len", "tgt_len"), "layers": ("enc_layers", "dec_layers")}
    groups = dict(tied)
    for field in SIZE_FIELDS:
        if field != "arch" and not any(field in cols for cols in tied.values()):
            groups[field] = (field,)
    names, variants = [], []
    for name, cols in groups.items():
        value = max(int(row.at[0, c]) for c in cols)
        if value >= 2:
            variant = row.copy()
            for c in cols:
                variant.loc[0, c] = max(1, int(row.at[0, c]) // 2)
            _follow_derived(row, variant)
            names.append((name, value))
            variants.append(variant)
    if not variants:
        return f"the {model.name} cost model's costs reach {reach:.3g} FLOPs, beyond exact 64-bit integers"
    frame = pd.concat([row, *variants], ignore_index=True)
    templates = build_for(model, frame)
    worst = _total_per_config(templates, _float_values(model, templates), len(frame))
    shares = {}
    for (name, value), halved in zip(names, worst[1:]):
        degree = np.log2(worst[0] / halved) if halved > 0 else 1.0
        shares[name] = (degree * np.log2(value), value)
    top = max(share for share, _ in shares.values())
    culprits = [name for name, (share, _) in sorted(shares.items(), key=lambda kv: -kv[1][0]) if share >= top / 2]
    sizes = " and ".join(str(shares[name][1]) for name in culprits)
    return (f"{', '.join(culprits)}: {sizes} make{'s' if len(culprits) == 1 else ''} a step's {model.name} cost "
            f"{reach:.3g} FLOPs, beyond exact 64-bit integers ({INT64_LIMIT:.3g}); reduce one")


def _follow_derived(row: pd.DataFrame, variant: pd.DataFrame) -> None:
    """Options derived from the sizes (head_dim = d_model / heads, kv_heads = heads) follow a halved size."""
    if "head_dim" in row and int(row.at[0, "head_dim"]) * int(row.at[0, "heads"]) == int(row.at[0, "d_model"]):
        variant.loc[0, "head_dim"] = max(1, int(variant.at[0, "d_model"]) // int(variant.at[0, "heads"]))
    if "kv_heads" in row and int(row.at[0, "kv_heads"]) == int(row.at[0, "heads"]):
        variant.loc[0, "kv_heads"] = int(variant.at[0, "heads"])


def check_overflow(configs: pd.DataFrame, cost_models=None, mirror_steps: int = 1) -> None:
    """Refuse configurations whose costs leave exact 64-bit integers, before any table is built."""
    for model, templates in _templates_per_model(configs, cost_models or cost_model_names()):
        _refuse_overflow(model, configs, templates, _float_values(model, templates), mirror_steps)


def build_for(model: CostModel, configs: pd.DataFrame, options: dict | None = None) -> Templates:
    """The templates ``model`` prices: every configuration, or (scope 'default') those of the 2017 transformer."""
    options = T.option_columns(configs) if options is None else options
    only = options["default_arch"] > 0 if model.scope == "default" else None
    return T.build(configs, model.granularity, only=only, options=options)


def out_of_scope(model_name: str, configs: pd.DataFrame) -> pd.DataFrame:
    """The configurations ``model_name`` does not define (their rows are absent from its tables)."""
    if cost_model(model_name).scope != "default":
        return configs.iloc[0:0]
    return configs[T.option_columns(configs)["default_arch"] == 0]


def _templates_per_model(configs: pd.DataFrame, cost_models):
    """Yield (CostModel, its Templates) per cost model, building the templates once per granularity and scope."""
    built: dict[tuple[str, str], Templates] = {}
    options = T.option_columns(configs)
    every = bool(np.all(options["default_arch"] > 0))  # every configuration in the 2017 transformer's scope
    for name in cost_models:
        model = cost_model(name)
        key = (model.granularity, "any" if every else model.scope)  # then a 'default' scope's templates are all
        if key not in built:
            built[key] = build_for(model, configs, options)
        yield model, built[key]


def _evaluate_all(configs: pd.DataFrame, cost_models, mirror_steps: int, derive: bool = True):
    """Yield (rank, name, Quantities) per cost model, building the templates once per granularity."""
    try:
        for rank, (model, templates) in enumerate(_templates_per_model(configs, cost_models)):
            yield rank, model.name, evaluate(model.name, configs, mirror_steps, templates, derive=derive, memo=True)
    finally:
        _FORMULA_MEMO.clear()


def phase_costs(quantities: Quantities, rule: str, mirror_steps: int = 1):
    """Yield (phase, template mask, maccs, flops, elementwise or None) for each phase of ``rule``."""
    n = len(quantities.templates)
    zero = np.zeros(n, dtype=np.int64)
    parts_of = recipe(rule, mirror_steps, quantities.cost_model)
    for phase in PHASES:
        parts = parts_of.get(phase)
        if not parts:
            continue
        mask = np.zeros(n, dtype=bool)
        maccs, flops = zero.copy(), zero.copy()
        elementwise = None if quantities.elementwise is None else zero.copy()
        for name, times in parts:
            if name not in quantities.declared:
                continue
            mask |= quantities.declared[name]
            maccs += times * quantities.maccs[name]
            flops += times * quantities.flops[name]
            if elementwise is not None:
                elementwise += times * quantities.elementwise.get(name, zero)
        if mask.any():
            yield phase, mask, maccs, flops, elementwise


# ---------------------------------------------------------------------------
# Tables

TABLE_COLUMNS = (
    "config_id", "rule", "cost_model", "stack", "block", "layer", "layer_kind", "phase", "maccs", "flops", "elementwise_flops",
)


def _instances(templates: Templates, rows: np.ndarray) -> dict[str, np.ndarray]:
    """Expand template rows into named layer instances (one per block)."""
    count = np.where(templates.is_block[rows], templates.count[rows], 1)
    rep = np.repeat(rows, count)
    starts = np.repeat(np.cumsum(count) - count, count)
    block = np.arange(len(rep)) - starts + templates.first[rep]  # (a mixture's blocks after its dense first ones)
    is_block = templates.is_block[rep]
    block = np.where(is_block, block, -1)
    stack = templates.stack[rep]
    sub = templates.sub[rep]
    names = np.where(
        is_block,
        pd.Series(stack).str.cat([pd.Series(block.astype(str)), pd.Series(sub)], sep=".").to_numpy(dtype=object),
        np.where(stack == "", sub, pd.Series(stack).str.cat(pd.Series(sub), sep=".").to_numpy(dtype=object)),
    )
    return {"rep": rep, "block": block, "layer": names}


def _nullable(values: np.ndarray | None, rows: np.ndarray) -> pd.arrays.IntegerArray:
    """Int64 values at ``rows``, or nulls where the cost model has no such column."""
    if values is None:
        return pd.arrays.IntegerArray(np.zeros(len(rows), dtype=np.int64), np.ones(len(rows), dtype=bool))
    return pd.arrays.IntegerArray(values[rows].astype(np.int64), np.zeros(len(rows), dtype=bool))


def layer_table(configs: pd.DataFrame, rules=None, cost_models=None, mirror_steps: int = 1) -> pd.DataFrame:
    """The long table: one row per (config_id, rule, cost_model, layer, phase), in forward order."""
    frames = []
    rules = rules or rule_names()
    cost_models = cost_models or cost_model_names()
    for model_rank, model_name, quantities in _evaluate_all(configs, cost_models, mirror_steps):
        t = quantities.templates
        every = _instances(t, np.arange(len(t)))  # named once per cost model, selected per phase
        for rule_rank, rule in enumerate(rules):
            for phase, mask, maccs, flops, elementwise in phase_costs(quantities, rule, mirror_steps):
                keep = mask[every["rep"]]
                inst = {key: value[keep] for key, value in every.items()}
                rep = inst["rep"]
                frames.append(
                    pd.DataFrame(
                        {
                            "_cfg": t.cfg[rep],
                            "_rule": rule_rank,
                            "_model": model_rank,
                            "_rank": t.rank[rep],
                            "_phase": PHASES.index(phase),
                            "rule": rule,
                            "cost_model": model_name,
                            "stack": t.stack[rep],
                            "block": inst["block"],
                            "layer": inst["layer"],
                            "layer_kind": t.kind[rep],
                            "phase": phase,
                            "maccs": maccs[rep],
                            "flops": flops[rep],
                            "elementwise_flops": _nullable(elementwise, rep),
                        }
                    )
                )
    if not frames:  # no configuration in any cost model's scope
        return pd.DataFrame({c: pd.Series(dtype="int64" if c in ("block", "maccs", "flops") else str)
                             for c in TABLE_COLUMNS})
    table = pd.concat(frames, ignore_index=True)
    # Forward order: stack by stack, the ends before block 0, block by block, sublayers in order.
    table = table.assign(_stack=table["_rank"] // 1000, _sub=table["_rank"] % 1000)
    table = table.assign(_tail=table["_sub"] >= T.TAIL_RANK)  # a stack's final norm follows its blocks
    table = table.sort_values(["_cfg", "_rule", "_model", "_stack", "_tail", "block", "_sub", "_phase"], kind="stable")
    table.insert(0, "config_id", configs["config_id"].to_numpy()[table["_cfg"].to_numpy()])
    table = table[list(TABLE_COLUMNS)].reset_index(drop=True)
    for column in ("config_id", "rule", "cost_model", "stack", "layer", "layer_kind", "phase"):
        table[column] = table[column].astype(str)
    table["block"] = table["block"].astype("int64")
    table["maccs"] = table["maccs"].astype("int64")
    table["flops"] = table["flops"].astype("int64")
    return table


def layer_rows(configs: pd.DataFrame, rules=None, cost_models=None) -> int:
    """At most how many rows :func:`layer_table` returns, counted from the templates alone."""
    rules, cost_models = rules or rule_names(), cost_models or cost_model_names()
    rows = 0
    for granularity in {cost_model(name).granularity for name in cost_models}:
        per_model = sum(1 for name in cost_models if cost_model(name).granularity == granularity)
        rows += int(T.build(configs, granularity).count.sum()) * per_model
    return rows * len(rules) * len(PHASES)


def _int_sums(quantities: Quantities, values: np.ndarray) -> np.ndarray:
    """Per configuration, the exact int64 sum of ``values`` x count over its templates."""
    t = quantities.templates
    total = np.zeros(len(quantities.templates.configs), dtype=np.int64)
    np.add.at(total, t.cfg, values * t.count)
    return total


def _float_count(templates: Templates) -> np.ndarray:
    """The templates' instance counts in float64 (computed once per templates)."""
    if "float_count" not in templates._cache:
        templates._cache["float_count"] = templates.count.astype(np.float64)
    return templates._cache["float_count"]


def phase_totals(configs: pd.DataFrame, rules=None, cost_models=None, mirror_steps: int = 1) -> dict:
    """Per-configuration totals, {(cost_model, rule, phase): (maccs, flops)} arrays of len(configs).

    The vectorised core without naming layer instances: what the benchmark times. A phase is a
    weighted sum of quantities, and a quantity is zero on the templates that do not declare it,
    so each quantity is summed per configuration once and the phases combine those sums.
    """
    out = {}
    rules = rules or rule_names()
    try:
        for model, t in _templates_per_model(configs, cost_models or cost_model_names()):
            _model_totals(out, model, t, configs, rules, mirror_steps)
    finally:
        _FORMULA_MEMO.clear()
    return out


def _model_totals(out: dict, model: CostModel, t: Templates, configs: pd.DataFrame, rules, mirror_steps: int) -> None:
    """:func:`phase_totals` of one cost model on its templates ``t``, into ``out``.

    The formulas' values stay per sequence on their kinds' rows (:func:`_formula_pieces`); each quantity is
    summed per configuration once, each row weighed by its batch and count (and, for the derived quantities, by
    whether the row takes part), and the phases combine those sums. Below EXACT_FLOAT every product and partial
    sum is an exact integer in float64, so the sums are the exact totals; the configurations at or above it
    (:func:`_large`) are summed from their int64 evaluation.
    """
    n = len(configs)
    pieces, declared_rows = _formula_pieces(model, t, memo=True)
    worst = _pieces_total(t, (pieces["flops"], pieces["elementwise"]), n)
    if worst is not None:
        _refuse_worst(model, configs, worst, mirror_steps)
    large_cfg, alone = _large(model, configs, t, worst, mirror_steps)
    _derive_backward({}, declared_rows, t.block_entry, t.kv_entry, len(t))
    _derive_units({}, declared_rows, t)
    declared = {name: bool(mask.any()) for name, mask in declared_rows.items()}
    whole = "model" in t.kind_slices
    heads = [t.kind_slices[kind] for kind in L.HEAD_KINDS if kind in t.kind_slices]
    masked: dict[tuple[str, str, str], np.ndarray | None] = {}
    sums: dict[tuple[str, str], np.ndarray] = {}

    def row_weight(which: str) -> np.ndarray:
        """Each row's batch x count, in float64, times 0 or 1 by ``which``: '' every row, 'unit' (blocks and
        final norms), 'inner' (residual input inside the block), 'kv_inner' (keys and values inside the block),
        each with '_body': not the head's rows."""
        key = ("row_weight", which)
        if key not in t._cache:
            weight = _float_count(t) * t.shape_column("B", np.float64)
            base = which.removesuffix("_body")
            keep = {"unit": lambda: t.is_block | (t.rank % 1000 >= T.TAIL_RANK), "inner": lambda: ~t.block_entry,
                    "kv_inner": lambda: ~t.kv_entry, "": lambda: None}[base]()
            if which.endswith("_body"):
                keep = np.ones(len(t), dtype=bool) if keep is None else keep.copy()
                for index in heads:
                    keep[index] = False
            t._cache[key] = weight if keep is None else weight * keep
        return t._cache[key]

    def stored_sum(store: str, name: str, which: str = "") -> np.ndarray | None:
        """Per configuration, the float sum of a formula's quantity x batch x count over its rows (``which``:
        :func:`row_weight`); None where no formula declares it."""
        key = (store, name, which)
        if key not in masked:
            found = pieces[store].get(name)
            total = None
            if found is not None:
                weight = row_weight(which)
                total = np.zeros(n, dtype=np.float64)
                for index, values in found:
                    total += np.bincount(t.cfg[index], weights=values * weight[index], minlength=n)
            masked[key] = total
        return masked[key]

    def float_sum(store: str, name: str) -> np.ndarray | None:
        """A quantity's per-configuration float sum; the derived ones (not evaluated) from their parts'."""
        body = "_body" if heads else ""
        if name == "forward_unit":
            terms = [("forward", "" if whole else "unit")]
        elif name == "backward_total":
            terms = [(k, "") for k in BACKWARD_PARTS]
        elif name == "backward_dfa":
            terms = [("backward", ""), ("backward_q", "inner"), ("backward_skip", "inner"), ("backward_kv", "kv_inner")]
        elif name == "backward_local":  # DFA's backward without the head's rows
            terms = [("backward", body), ("backward_q", "inner" + body), ("backward_skip", "inner" + body),
                     ("backward_kv", "kv_inner" + body)]
        else:
            terms = [(name, "")]
        found = [v for v in (stored_sum(store, k, w) for k, w in terms) if v is not None]
        return sum(found[1:], found[0]) if found else None

    def per_config(store: str, name: str) -> np.ndarray:
        if (store, name) not in sums:
            total = float_sum(store, name)
            total = np.zeros(n, dtype=np.int64) if total is None else total.astype(np.int64)  # exact: below EXACT_FLOAT
            if alone is not None:  # the configurations too large for exact floats, from int64
                values = getattr(alone, store).get(name)
                total[large_cfg] = 0 if values is None else _int_sums(alone, values)
            sums[(store, name)] = total
        return sums[(store, name)]

    zero = np.zeros(n, dtype=np.int64)
    for rule in rules:
        parts_of = recipe(rule, mirror_steps, model.name)
        for phase in PHASES:
            parts = [(name, times) for name, times in parts_of.get(phase, ()) if declared.get(name)]
            if not parts:
                continue
            maccs, flops = zero.copy(), zero.copy()
            for name, times in parts:
                maccs += times * per_config("maccs", name)
                flops += times * per_config("flops", name)
            out[(model.name, rule, phase)] = (maccs, flops)
