"""Leave-one-dataset-out choice (bench/loo.py) on hand-made turn records, and the dense gate's standing-out rule
(companion.engine.retrievers.standout) it is compared with."""

from __future__ import annotations

from bench.loo import WINDOWS, Record, Turn, choose, leave_one_out
from companion.engine.retrievers import DensePolicy, standout
from companion.recall.chars import Evidence


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
    assert choose(records[::2], (0.3, 0.4, 0.6), 0.1)[1:] == (0.3, None, "share")
    folds = {f["held out"]: f for f in leave_one_out(records, (0.3, 0.4, 0.6), 0.1)}
    assert folds["b"]["share"] == 0.3 and folds["b"]["false injection, other user"] == 1.0  # fails held out
    assert folds["a"]["share"] == 0.6 and folds["a"]["gated hit"] == 1.0


def test_a_margin_over_the_scope_s_usual_share_adapts_where_one_share_cannot() -> None:
    # In "b" every memory shares a lot with any turn (a high usual share): a margin over it holds there too.
    records = [record("a", 0.5, 0.35, reference=0.1), record("b", 0.8, 0.6, reference=0.5)]
    window, share, margin, _ = choose(records, (0.3, 0.4, 0.7), 0.1, (None, 0.2))
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
    # A model that puts any two sentences close (E5 on Chinese): a scope too small to measure admits nothing.
    compressed = DensePolicy(min_similarity=0.2, min_standout=4.0, floor_decides_small_scopes=False)
    assert standout([(1, 0.88), (2, 0.85), (3, 0.84)], compressed) == []
    assert [h for h, _ in standout(clear, compressed)] == [1, 2]


def evidence_turn(kind: str, asked: float, lone: float) -> Turn:
    out = turn(kind, asked)
    for window in WINDOWS:
        out.evidence[window] = [((Evidence(asked, lone, 0.0, 1.0), 1.0), None)]
    return out


def test_a_rule_is_replayed_from_the_recorded_evidence_and_chosen_like_its_threshold() -> None:
    # Chinese-like sets: many units per turn, one unit alone is little (lone 0.1); the English-like set: three
    # words, so one chance word is already 0.4 of the turn. A share chosen on the first two lets that through.
    zh = [Record(n, [evidence_turn("positive", 0.6, 0.1), evidence_turn("other user", 0.3, 0.1)]) for n in "ab"]
    en = Record("en", [evidence_turn("positive", 0.75, 0.35), evidence_turn("other user", 0.4, 0.4)])
    assert en.gate("turn", 0.35)["false injection, other user"] == 1.0
    assert en.gate("turn", 0.2, rule="beyond chance") == {"gated hit": 1.0, "false injection, other user": 0.0,
                                                         "false injection, certified": 0.0}
    window, threshold, _, rule = choose(zh, (0.2, 0.35, 0.5), 0.1, rules=("beyond chance",))
    assert (threshold, rule) == (0.35, "beyond chance")  # the most the Chinese sets allow
    assert en.gate(window, threshold, rule=rule)["false injection, other user"] == 0.0
    assert en.gate(window, threshold, rule=rule)["gated hit"] == 1.0
    # A candidate whose clause coverage failed on both sides never passes, whatever the rule.
    blocked = evidence_turn("positive", 0.9, 0.1)
    blocked.evidence["turn"] = [((Evidence(0.9, 0.1, 0.0, 1.0), 0.1), None)]
    assert blocked.injected("turn", 0.1, rule="beyond chance") == []
