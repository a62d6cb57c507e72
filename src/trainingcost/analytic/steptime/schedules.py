"""Pipeline schedules: what each leaves idle (its bubble) and what it keeps alive (docs/planning.md, "Pipeline
schedules").

Per micro-batch a stage runs its forward F, the backward's input gradients B (every kernel of the backward but the
weight-gradient products, the recompute included) and the weight gradients W (the weight-gradient products alone).
1F1B runs B and W together, so each stage waits for the others' F + B + W at the pipeline's fill and drain:

- ``1f1b``: (p - 1)(F + B + W) (Narayanan et al. 2021, section 2.2), and ``interleaved`` with v chunks per GPU the
  same over v (ibid.), whose first GPU keeps p + (p - 1)/v stages' micro-batches of activations where 1F1B keeps p
  (Korthikanti et al. 2022, section 4.2.3: 1 + (p - 1)/(p v) times; torch's ScheduleInterleaved1F1B's order keeps as
  many, tests/test_schedules.py);
- ``zb-h1``: W deferred into the drain, (p - 1)(F + B - W) (Qi et al. 2024, "Zero Bubble Pipeline Parallelism",
  section 2.2), with 1F1B's activation memory; where W exceeds F or B a deferred W cannot fill more than the idle slot
  it goes into, so (p - 1)(F + B - min(W, F, B)), as torch.distributed.pipelining's ScheduleInterleavedZeroBubble
  runs it (tests/test_schedules.py simulates torch's own schedule);
- ``zb-h2``: more micro-batches in the warm-up, (p - 1)(F + B - 2W), none below zero, with up to 2p - 1 micro-batches
  of activations alive (Qi et al. 2024, section 2.2);
- ``zb-v``: two chunks per GPU in a V, zero bubble when F = B = W at 1F1B's activation memory (Qi et al. 2024, section
  4; "Pipeline Parallelism with Controllable Memory", Qi et al. 2024b), priced as (p - 1)(F + B - 2W) over its two
  chunks, none below zero; twice 1F1B's point-to-point sends;
- ``dualpipe``: micro-batches fed from both ends, (p/2 - 1)(F&B + B_full - 3W) with F&B a forward and a backward
  chunk run together and B_full = B + W (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", section 3.2.1 and Table
  2); with no communication to hide (F&B = F + B + W) that is (p/2 - 1)(F + 2B - W). Each GPU holds two stages, one
  per direction: the parameters twice over, and p + 1 micro-batches of activations.

In units of one stage's F, B and W per micro-batch, :func:`bubble_stages` gives the bubble as a number of "other
stages" at each schedule's rate, so the step model prices uneven splits (each other stage at its own times) the same
way as 1F1B's.
"""

from __future__ import annotations

from ...config.errors import ConfigError

SCHEDULES = ("1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipe")
SPLIT = ("zb-h1", "zb-h2", "zb-v", "dualpipe")  # the schedules that run the weight gradients apart from the backward
SOURCES = {
    "1f1b": "1F1B: bubble (p - 1)(F + B + W), p micro-batches of activations (Narayanan et al. 2021, section 2.2)",
    "interleaved": "interleaved 1F1B: bubble (p - 1)(F + B + W) / v (Narayanan et al. 2021, section 2.2), p + (p - 1)/v "
                   "micro-batches of activations (Korthikanti et al. 2022, section 4.2.3)",
    "zb-h1": "ZB-H1: bubble (p - 1)(F + B - W), 1F1B's activations (Qi et al. 2024, Zero Bubble Pipeline "
             "Parallelism, section 2.2)",
    "zb-h2": "ZB-H2: bubble (p - 1)(F + B - 2W), 2p - 1 micro-batches of activations (Qi et al. 2024, section 2.2)",
    "zb-v": "ZB-V: zero bubble when F = B = W, 1F1B's activations, twice its sends (Qi et al. 2024, section 4)",
    "dualpipe": "DualPipe: bubble (p/2 - 1)(F&B + B - 3W), parameters twice, p + 1 micro-batches of activations "
                "(DeepSeek-V3 Technical Report, 2024, Table 2)",
}


def effective(schedule: str, interleave: int) -> str:
    """The schedule a layout runs: the one given, else 1F1B, interleaved where it has more than one chunk per GPU."""
    return schedule or ("interleaved" if interleave > 1 else "1f1b")


def rate(schedule: str, f: float, b: float, w: float) -> float:
    """A stage's idle seconds per other stage at the fill and drain, from one stage's F, B and W per micro-batch
    (1F1B: F + B + W)."""
    if schedule in ("1f1b", "interleaved"):
        return f + b + w
    if schedule == "zb-h1":
        return f + b - min(w, f, b)
    if schedule == "zb-h2":
        return max(0.0, f + b - 2 * w)
    if schedule == "zb-v":
        return max(0.0, f + b - 2 * w) / 2  # two chunks per GPU, each half the stage
    if schedule == "dualpipe":
        return max(0.0, f + 2 * b - w)
    raise ValueError(schedule)


def others_scale(schedule: str, p: int) -> float:
    """How many of the other stages' rates the bubble counts: p - 1 of them (1F1B and the zero-bubble schedules),
    p/2 - 1 for DualPipe's two directions."""
    return (p / 2 - 1) / (p - 1) if schedule == "dualpipe" and p > 1 else 1.0


def in_flight(schedule: str, p: int, v: int = 1) -> float:
    """Micro-batches of activations the fullest stage keeps, over 1F1B's p (``v``: interleaved 1F1B's chunks per GPU,
    of which the first GPU keeps p + (p - 1)/v stages' worth)."""
    if schedule == "interleaved" and v > 1:
        return 1 + (p - 1) / (p * v)
    if schedule == "zb-h2":
        return (2 * p - 1) / p
    if schedule == "dualpipe":
        return (p + 1) / p
    return 1.0


def kept_share(schedule: str, p: int, v: int, m: int) -> float:
    """The share of :func:`in_flight`'s micro-batches a pipeline of ``m`` micro-batches per step keeps: the first
    stage holds no more micro-batches than the step has (1F1B's warm-up of p stops at m; torch's orders keep
    min(m, p x in_flight) too, tests/test_schedules.py)."""
    if p <= 1:
        return 1.0
    return min(1.0, m / (p * in_flight(schedule, p, v)))


def parameter_copies(schedule: str) -> int:
    """Copies of each stage's parameters (and their gradients and optimizer state) the pipeline holds."""
    return 2 if schedule == "dualpipe" else 1


def sends(schedule: str) -> int:
    """Point-to-point sends per micro-batch and direction, over 1F1B's (ZB-V's V crosses every GPU twice)."""
    return 2 if schedule == "zb-v" else 1


def check_schedule(schedule: str, pp: int, interleave: int, accumulation: int, through: bool, rule: str = "bp",
                   flag: str = "--schedule") -> None:
    """One line naming the flag and what is allowed, for a schedule this layout cannot run."""
    if schedule not in SCHEDULES:
        raise ConfigError(f"{flag}: {schedule!r} is not allowed (allowed: {', '.join(SCHEDULES)})")
    if schedule == "1f1b":
        if interleave > 1:
            raise ConfigError(f"{flag}: 1f1b runs one chunk per GPU; --interleave {interleave} is the interleaved "
                              "schedule (--schedule interleaved)")
        return
    if pp < 2:
        raise ConfigError(f"{flag}: {schedule} needs pipeline stages (--pp 2 or more; got --pp {pp})")
    if schedule == "interleaved":
        if interleave < 2:
            raise ConfigError(f"{flag}: interleaved needs --interleave 2 or more (got {interleave})")
        return
    if interleave > 1:
        raise ConfigError(f"{flag}: {schedule} sets its own chunks per GPU; --interleave {interleave} goes with "
                          "--schedule interleaved (allowed with it: 1)")
    if not through:
        raise ConfigError(f"{flag}: {schedule} splits the backward that a rule sends back stage by stage (bp, fa, kp, "
                          f"wm); rule {rule} sends none (allowed with it: 1f1b, interleaved)")
    if schedule == "dualpipe":
        if pp % 2:
            raise ConfigError(f"{flag}: dualpipe needs an even number of pipeline stages (got --pp {pp})")
        if accumulation < 2 * pp or accumulation % 2:
            raise ConfigError(f"{flag}: dualpipe feeds half the micro-batches from each end: it needs an even number "
                              f"of them, at least 2 x --pp = {2 * pp} per step (got {accumulation}; deepseek-ai/"
                              "DualPipe dualpipe.py)")
