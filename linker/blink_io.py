"""BLINK's inputs and outputs: mention records in, ranked candidates and BLINK's metrics out.

Input (BLINK's ``--test_mentions``): JSONL, one mention per line::

    {"context_left": "...", "mention": "...", "context_right": "...",
     "id": ..., "label": "...", "label_id": 12345, "label_title": "..."}      (id and labels optional)

``label_id`` is the gold entity's Wikipedia curid for BLINK's KB (as in
BLINK), or the corpus's entity id for a corpus KB; ``label_title`` is used
when there is no usable ``label_id``.

Output, one JSON line per mention, as BLINK's ``main_dense`` reports it plus
the linker's choice::

    {"id": ..., "mention": ...,
     "biencoder":    [{"rank", "kb_row", "title", "entity_id", "wikipedia_id", "url", "score"}, ...]   top_k, raw dot products
     "crossencoder": [... same, "score" = the cross-encoder logit ...]       BLINK's re-ranking (not with --fast)
     "linked": {"title", "entity_id", "kb_row", "wikipedia_id", "url", "score", "accepted"}  the final choice
     "gold_row": ...}                                                        with labels

Metrics with labels (:func:`blink_metrics`): BLINK's ``biencoder_accuracy``,
``recall@k`` for k = 1..top_k, ``blink_recall_at`` (the number
``main_dense`` prints as "recall@top_k", which its loop computes at
top_k - 1), ``crossencoder_normalized_accuracy`` (among the mentions whose
gold entity the bi-encoder retrieved), ``overall_unnormalized_accuracy``, and
the linker's own accuracy. Like BLINK, mentions whose gold entity is not in
the KB are left out of the metrics (counted).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from linker.inputs import ContextText
from linker.mentions import DetectedSpan

GIVEN = "given"


@dataclass(frozen=True)
class MentionRecord:
    record: dict
    context: ContextText

    @property
    def mention(self) -> str:
        return self.context.mention


def parse_mention_record(line: str) -> MentionRecord:
    """One JSONL line -> a MentionRecord (ValueError with the reason when it is not one)."""
    record = json.loads(line)
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    fields = {}
    for name in ("context_left", "mention", "context_right"):
        value = record.get(name, "" if name != "mention" else None)
        if not isinstance(value, str):
            raise ValueError(f"no string field {name!r}")
        fields[name] = value
    return MentionRecord(record, ContextText(fields["context_left"], fields["mention"], fields["context_right"]))


def read_mention_records(path: str) -> tuple[list[MentionRecord], list[dict]]:
    """(the records, the lines that are not mention records: {"line", "reason"})."""
    records, bad = [], []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                records.append(parse_mention_record(line))
            except ValueError as err:
                bad.append({"line": number, "reason": str(err)})
    return records, bad


def gold_row(record: dict, kb) -> int | None:
    """The KB row of a record's gold entity; -1 when labelled but not in the KB; None when unlabelled."""
    label_id, title = record.get("label_id"), record.get("label_title")
    if label_id is None and title is None:
        return None
    if isinstance(label_id, (int, str)) and str(label_id).strip().lstrip("-").isdigit() and int(label_id) >= 0:
        number = int(label_id)
        row = kb.row_of_wikipedia_id(number) if kb.kind == "blink" else kb.row_of_entity_id(number)
        if row >= 0:
            return row
    if isinstance(title, str) and title:
        return kb.row_of_title(title)
    return -1


def spans_of(records: list[MentionRecord], linker) -> list[DetectedSpan]:
    return [DetectedSpan(0, len(r.mention), r.mention, GIVEN, linker.alias_candidates(r.mention)) for r in records]


def _entry(linker, rank: int, row: int, score: float) -> dict:
    kb = linker.kb
    return {"rank": rank, "kb_row": int(row), "title": kb.title(row), "entity_id": int(kb.entity_ids[row]),
            "wikipedia_id": int(kb.wikipedia_ids[row]), "url": kb.url(row), "score": float(score)}


def result_record(record: MentionRecord, result, linker, gold: int | None = None) -> dict:
    """The output line of one mention (see the module doc)."""
    out = {"id": record.record.get("id"), "mention": record.mention,
           "biencoder": [_entry(linker, i + 1, r, s) for i, (r, s) in
                         enumerate(zip(result.retrieved_rows.tolist(), result.retrieved_scores.tolist()))]}
    reranked = result.crossencoder_ranking(linker.config.rerank_top_k)
    if reranked is not None:
        out["crossencoder"] = [_entry(linker, i + 1, r, s) for i, (r, s) in enumerate(zip(*map(list, reranked)))]
    linked = linker.linked_mention(result)
    out["linked"] = None if linked is None else {
        "title": linked.entity, "entity_id": linked.entity_id, "kb_row": linked.kb_row,
        "wikipedia_id": linked.wikipedia_id, "url": linker.kb.url(linked.kb_row), "score": round(linked.score, 6),
        "accepted": linker.accepted(linked)}
    if gold is not None:
        out["gold_row"] = gold
    return out


def blink_metrics(results, golds: list[int | None], top_k: int, rerank_top_k: int) -> dict:
    """BLINK's metrics over the labelled mentions whose gold entity is in the KB."""
    labelled = [(r, g) for r, g in zip(results, golds) if g is not None]
    usable = [(r, g) for r, g in labelled if g >= 0]
    out = {"mentions": len(results), "labelled": len(labelled), "labels_not_in_kb": len(labelled) - len(usable)}
    if not usable:
        return out
    n = len(usable)
    positions = [next((i for i, row in enumerate(r.retrieved_rows.tolist()) if row == g), None) for r, g in usable]
    recall = {k: sum(p is not None and p < k for p in positions) / n for k in range(1, top_k + 1)}
    out.update({
        "biencoder_accuracy": recall[1],
        "recall@k": recall,
        "blink_recall_at": recall[top_k - 1] if top_k > 1 else -1,
    })
    reranked = [(r.crossencoder_ranking(rerank_top_k), g) for r, g in usable]
    if all(x is not None for x, _ in reranked):
        in_candidates = [(x, g) for x, g in reranked if g in x[0].tolist()]
        hits = sum(int(x[0][0]) == g for x, g in in_candidates)
        out["crossencoder_normalized_accuracy"] = hits / len(in_candidates) if in_candidates else 0.0
        out["overall_unnormalized_accuracy"] = hits / n
    out["linker_accuracy"] = sum(len(r.order) > 0 and int(r.candidates.rows[r.order[0]]) == g for r, g in usable) / n
    return out
