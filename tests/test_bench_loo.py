"""Leave-one-dataset-out choice (bench/loo.py) on hand-made turn records, and the dense gate's standing-out rule
(companion.engine.retrievers.standout) it is compared with."""

from __future__ import annotations

from bench.loo import WINDOWS, Record, Turn, choose, leave_one_out
from companion.engine.retrievers import DensePolicy, standout


def turn(kind: str, share: float, *, gold: bool = True, reference: float = 0.0) -> Turn:
    ids = ("g",) if gold and kind == "positive" else ("x",)
    out = Turn(kind, True, ("g",) if kind == "positive" else ())
    for window in WINDOWS:
        out.candidates[window] = [(ids, share)]
        out.reference[window] = reference
        out.ranked[window] = list(ids)
    return out


def record(name: str, positive: float, negative: float, reference: float = 0.0) -> Record:
    return Record(name, [turn("positive", positive, reference=reference),
                         turn("other user", negative, reference=reference)])


def test_the_share_is_chosen_on_the_other_sets_and_reported_on_the_held_out_one() -> None:
    # Set "b" injects on its negative turn up to share 0.55: the others alone would pick 0.3.
    records = [record("a", 0.8, 0.2), record("b", 0.8, 0.55), record("c", 0.8, 0.25)]
    assert choose(records[::2], (0.3, 0.4, 0.6), 0.1)[1:] == (0.3, None)
    folds = {f["held out"]: f for f in leave_one_out(records, (0.3, 0.4, 0.6), 0.1)}
    assert folds["b"]["share"] == 0.3 and folds["b"]["false injection, other user"] == 1.0  # fails held out
    assert folds["a"]["share"] == 0.6 and folds["a"]["gated hit"] == 1.0


def test_a_margin_over_the_scope_s_usual_share_adapts_where_one_share_cannot() -> None:
    # In "b" every memory shares a lot with any turn (a high usual share): a margin over it holds there too.
    records = [record("a", 0.5, 0.35, reference=0.1), record("b", 0.8, 0.6, reference=0.5)]
    window, share, margin = choose(records, (0.3, 0.4, 0.7), 0.1, (None, 0.2))
    assert (share, margin) == (0.4, 0.2)
    assert all(r.gate(window, share, margin)["gated hit"] == 1.0 for r in records)


def test_a_dense_candidate_must_stand_out_from_the_scope_s_usual_similarity() -> None:
    policy = DensePolicy(min_similarity=0.0, min_standout=2.0, by_scope_size=True)
    flat = [(1, 0.71), (2, 0.70), (3, 0.70), (4, 0.69), (5, 0.70), (6, 0.71)]  # a model that scores all alike
    assert standout(flat, policy) == []
    clear = [(1, 0.62), (2, 0.41), (3, 0.30), (4, 0.31), (5, 0.29), (6, 0.30)]
    assert [h for h, _ in standout(clear, policy)] == [1, 2]
    assert standout(clear[:3], policy) == clear[:3]  # too few to have a usual similarity: the floor decides
    assert standout(clear, DensePolicy(min_similarity=0.5, min_standout=0.0)) == clear[:1]
