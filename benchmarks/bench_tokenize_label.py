"""Benchmark: tokenising and label matching, before and after (issue 12's two levers).

Side by side in one run, interleaved, repeated; medians and ratios. Inputs are
the article texts of shared dumps rendered with ``extract_article`` (default:
the 206-page enwiki excerpt and the ukwiki excerpt, for Latin and Cyrillic).

Tokenising (per dump, all articles, their hyperlinks as mentions):
* ``hf_encode``: the Hugging Face GPT-2 tokenizer, ids + offsets (the encode
  the job ran before); ``tiktoken_encode``: :class:`Gpt2BpeEncoder`;
* ``old_tokenize``/``new_tokenize``: the whole ``tokenize_with_mentions``
  (encode + mentions onto tokens), the old code (a copy kept in
  tests/test_tokenizer_equivalence.py) on Hugging Face vs the new code on tiktoken.
* tokenizer build: in a fresh process (imports included, as a worker pays it)
  and again in-process (build only), Hugging Face vs tiktoken.

Label matching (per dump, all articles, candidates = the aliases of every
linked entity and of the title entity, as the job's join brings them):
``old_labels`` (the token-scan matcher, a copy kept in
tests/test_matcher_equivalence.py) vs ``new_labels`` (Aho-Corasick), the whole
``label_missing_mentions``; ``old_match``/``new_match``: the matching alone
(finding every whole-word occurrence in the folded text, automaton build
included), without the candidate filtering and the greedy pass that both share.

Usage: ``python benchmarks/bench_tokenize_label.py [--dumps a,b] [--repeat 5] [--json OUT]``
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipelines.corpus import tokenizer as T  # noqa: E402
from pipelines.corpus.labels import LabelConfig, label_missing_mentions  # noqa: E402
from pipelines.records import Mention  # noqa: E402
from tests.dump_articles import dump_articles, labelling_inputs  # noqa: E402
from pipelines.corpus import labels as L  # noqa: E402
from tests.test_matcher_equivalence import _reference_occurrences, reference_labels  # noqa: E402
from tests.test_tokenizer_equivalence import old_tokenize_with_mentions  # noqa: E402

DEFAULT_DUMPS = "enwiki-2016-206pages-articles1.xml.bz2,ukwiki-2023-first100k-lines-truncated.xml.xz"

BUILD_IN_FRESH_PROCESS = {
    "hf": "from pipelines.corpus.tokenizer import build_gpt2_bpe_tokenizer as build",
    "tiktoken": "from pipelines.corpus.tokenizer import Gpt2BpeEncoder; build = Gpt2BpeEncoder.build",
}


def time_once(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def build_in_fresh_process(kind: str) -> float:
    code = ("import time; t = time.perf_counter(); " + BUILD_IN_FRESH_PROCESS[kind]
            + "; build(); print(time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def summarise(samples: dict[str, list[float]]) -> dict[str, dict]:
    return {name: {"median_s": statistics.median(xs), "samples_s": xs} for name, xs in samples.items()}


def run(dumps: list[str], repeat: int) -> dict:
    hf, encoder = T.load_tokenizer(), T.load_encoder()
    config = LabelConfig()
    results: dict = {"dumps": {}, "build": {}}

    # ---- tokenizer build: fresh processes, then in-process (uncached) builds
    build: dict[str, list[float]] = {f"{k}_fresh_process": [] for k in BUILD_IN_FRESH_PROCESS}
    build.update(hf_in_process=[], tiktoken_in_process=[])
    for _ in range(repeat):
        for kind in BUILD_IN_FRESH_PROCESS:
            build[f"{kind}_fresh_process"].append(build_in_fresh_process(kind))
        build["hf_in_process"].append(time_once(T.build_gpt2_bpe_tokenizer))
        build["tiktoken_in_process"].append(time_once(T.Gpt2BpeEncoder.build))
    results["build"] = summarise(build)
    results["build_ratio_fresh_process"] = (results["build"]["hf_fresh_process"]["median_s"]
                                            / results["build"]["tiktoken_fresh_process"]["median_s"])

    for name in dumps:
        articles = dump_articles(name)
        texts = [text for _t, text, _l in articles]
        mentions = [[Mention(x.start, x.end, x.surface, x.target, "hyperlink") for x in links]
                    for _t, _x, links in articles]
        pages = labelling_inputs((name,))
        folded_targets = [(L._fold(x, config.case_sensitive), targets) for _t, x, _links, cands in pages
                          if (targets := L.targets_for_candidates(cands, config))]
        split = config.match_unspaced_scripts
        n_tokens = sum(len(encoder.encode_with_offsets(t)[0]) for t in texts)
        n_chars = sum(map(len, texts))

        def old_tokenize():
            for text, ms in zip(texts, mentions):
                old_tokenize_with_mentions(text, ms, *T._hf_encode_with_offsets(text, hf))

        contenders: dict[str, Callable[[], object]] = {
            "hf_encode": lambda: [T._hf_encode_with_offsets(t, hf) for t in texts],
            "tiktoken_encode": lambda: [encoder.encode_with_offsets(t) for t in texts],
            "old_tokenize": old_tokenize,
            "new_tokenize": lambda: [T.tokenize_with_mentions(t, ms, encoder) for t, ms in zip(texts, mentions)],
            "old_labels": lambda: [reference_labels(x, links, cands, config) for _t, x, links, cands in pages],
            "new_labels": lambda: [label_missing_mentions(x, links, cands, config) for _t, x, links, cands in pages],
            "old_match": lambda: [_reference_occurrences(f, targets, split) for f, targets in folded_targets],
            "new_match": lambda: [L._find_occurrences(f, L._alias_automaton(targets), split)
                                  for f, targets in folded_targets],
        }
        samples: dict[str, list[float]] = {k: [] for k in contenders}
        for _ in range(repeat):
            for key, fn in contenders.items():
                samples[key].append(time_once(fn))
        timed = summarise(samples)
        for key in ("hf_encode", "tiktoken_encode", "old_tokenize", "new_tokenize"):
            timed[key]["tokens_per_s"] = n_tokens / timed[key]["median_s"]
        med = {k: v["median_s"] for k, v in timed.items()}
        results["dumps"][name] = {
            "articles": len(texts), "chars": n_chars, "tokens": n_tokens,
            "mentions": sum(map(len, mentions)),
            "candidates": sum(len(c) for *_, c in pages),
            "labels": sum(len(label_missing_mentions(x, links, cands, config)) for _t, x, links, cands in pages),
            "timings": timed,
            "ratios": {
                "encode hf/tiktoken": med["hf_encode"] / med["tiktoken_encode"],
                "tokenize_with_mentions old/new": med["old_tokenize"] / med["new_tokenize"],
                "labels old/new": med["old_labels"] / med["new_labels"],
                "matching alone old/new": med["old_match"] / med["new_match"],
            },
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dumps", default=DEFAULT_DUMPS, help="comma-separated names in ../shared/wikidumps")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    results = run(args.dumps.split(","), args.repeat)
    results.update(repeat=args.repeat, python=platform.python_version(), machine=platform.machine())

    print(f"tokenizer build (median of {args.repeat}):")
    for key, value in results["build"].items():
        print(f"  {key:<24}{value['median_s']:>8.3f} s")
    print(f"  ratio hf/tiktoken, fresh process: {results['build_ratio_fresh_process']:.1f}x")
    for name, res in results["dumps"].items():
        print(f"\n{name}: {res['articles']} articles, {res['chars']:,} chars, {res['tokens']:,} tokens, "
              f"{res['mentions']:,} links, {res['candidates']:,} alias candidates, {res['labels']:,} labels")
        for key, value in res["timings"].items():
            rate = f"{value['tokens_per_s'] / 1e6:>7.2f} M tokens/s" if "tokens_per_s" in value else ""
            print(f"  {key:<18}{value['median_s']:>8.3f} s  {rate}")
        for key, ratio in res["ratios"].items():
            print(f"  ratio {key:<34}{ratio:>6.2f}x")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
