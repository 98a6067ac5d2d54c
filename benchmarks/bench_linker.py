"""BLINK linker throughput on CPU: mentions linked per second, entities encoded per second,
and exact vs HNSW candidate search.

    python benchmarks/bench_linker.py                      # tiny BERT; JSON on stdout
    python benchmarks/bench_linker.py --sizes tiny,base --json benchmarks/results/linker.json

Linking runs on the project's sample corpus (built here unless ``--corpus OUT``
is given) with models of BLINK's architecture and random weights (``tiny``: 2
layers x 128; ``base``: BERT-base, 12 x 768; BLINK's release is BERT-large,
24 x 1024, about 3.5x base's cost per token): the speed does not depend on
the weights. "Linked mentions" are validation hyperlinks given as spans
(bi-encoder + search, with and without the cross-encoder over the top 10);
"detect+link" adds mention detection (spaCy tokenizer + alias table). Search
runs on random vectors shaped like encodings (clusters in a low-rank subspace;
isotropic noise is HNSW's worst case and no model's output). Times are medians
of ``--repeats``, on ``--threads`` torch threads (default 1).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402

SIZES = {
    "tiny": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256),
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
}


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def build_sample_corpus(workdir: Path) -> Path:
    dump = workdir / "samplewiki-pages-articles.xml.bz2"
    out = workdir / "corpus"
    subprocess.run([sys.executable, "-m", "pipelines.sample_dump", str(dump)], cwd=REPO, check=True,
                   capture_output=True)
    subprocess.run([sys.executable, "-m", "pipelines.wiki_mentions", "--input", str(dump), "--output", str(out),
                    "--validation_fraction", "0.2"], cwd=REPO, check=True, capture_output=True)
    return out


def write_random_release(folder: Path, vocab: str, shape: dict, seed: int = 0) -> Path:
    """A model folder in BLINK's layout (key names, file names) with random BERT weights."""
    from transformers import BertConfig, BertModel

    from linker.wordpiece import load_wordpiece

    folder.mkdir(parents=True, exist_ok=True)
    vocab_size = len(load_wordpiece(vocab))
    (folder / "vocab.txt").write_bytes(Path(vocab).read_bytes())
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=vocab_size, max_position_embeddings=512, **shape)
    state = {}
    for prefix in ("context_encoder", "cand_encoder"):
        state |= {f"{prefix}.bert_model.{k}": v for k, v in BertModel(config).state_dict().items()}
    torch.save(state, folder / "biencoder_wiki_large.bin")
    cross = {f"encoder.bert_model.{k}": v for k, v in BertModel(config).state_dict().items()}
    cross |= {"encoder.additional_linear.weight": torch.randn(1, shape["hidden_size"]) * 0.02,
              "encoder.additional_linear.bias": torch.zeros(1)}
    torch.save(cross, folder / "crossencoder_wiki_large.bin")
    params = {"max_context_length": 32, "max_cand_length": 128, "max_seq_length": 160, "lowercase": True,
              "num_attention_heads": shape["num_attention_heads"]}
    (folder / "biencoder_wiki_large.json").write_text(json.dumps({**params, "add_linear": False}))
    (folder / "crossencoder_wiki_large.json").write_text(json.dumps({**params, "add_linear": True}))
    return folder


def bench_linking(corpus: Path, workdir: Path, size: str, repeats: int, mentions: int, cross_mentions: int,
                  texts_n: int) -> dict:
    from linker.catalogue import read_catalogue
    from linker.corpus_data import iter_examples
    from linker.link import Linker, LinkerConfig, prepare_linker
    from linker.mentions import DetectorConfig
    from linker.wordpiece import build_vocab

    catalogue = read_catalogue(str(corpus))
    examples = list(iter_examples(str(corpus), "validation", limit=mentions))
    vocab = workdir / "vocab.txt"
    if not vocab.exists():
        build_vocab([*catalogue.titles, *catalogue.descriptions], str(vocab), 4000)
    model = write_random_release(workdir / f"model-{size}", str(vocab), SIZES[size])
    config = LinkerConfig(model=str(model), corpus=str(corpus), crossencoder="no",
                          detector=DetectorConfig(spacy_model="none"))
    from linker.link import encode_catalogue

    prepare_linker(config, rebuild=True)  # KB, encodings, alias index, fitted combination
    prepared = Linker(config, build_encodings=False)
    started = time.perf_counter()
    encode_catalogue(prepared.biencoder, prepared.kb, config.encode_batch_size)
    encode_s = time.perf_counter() - started
    items = []
    for ex in examples:  # each example as its own text with its mention given as a span
        text = ex.context.left + ex.context.mention + ex.context.right
        start = len(ex.context.left)
        items.append((text, [(start, start + len(ex.context.mention))]))
    texts = [text for text, _ in items[:texts_n]]
    result = {"model": size, "bert": SIZES[size], "entities": len(catalogue), "mentions": len(items),
              "cross_mentions": min(cross_mentions, len(items)), "texts": len(texts),
              "entities_encoded_per_s": len(catalogue) / encode_s}
    for rerank, sample in (("no", items), ("yes", items[:cross_mentions])):
        linker = Linker(LinkerConfig(model=str(model), corpus=str(corpus), crossencoder=rerank,
                                     detector=DetectorConfig(spacy_model="none")))  # fits its combination once
        seconds = median_time(lambda: linker.link_batch(sample), repeats)
        key = "biencoder" if rerank == "no" else "biencoder+crossencoder_top10"
        result[f"mentions_per_s/{key}"] = len(sample) / seconds
    linker = Linker(config, build_encodings=False)
    detected = sum(len(linker.detect(t)) for t in texts)
    seconds = median_time(lambda: [linker.link_text(t) for t in texts], repeats)
    result["texts_per_s/detect+link"] = len(texts) / seconds
    result["mentions_per_s/detect+link"] = detected / seconds
    return result


def encodings_like(n: int, dim: int, seed: int, clusters: int = 1000, latent: int = 32) -> np.ndarray:
    """Vectors shaped like entity encodings: clusters (types, topics) in a low-dimensional subspace
    (BERT [CLS] vectors have a low effective rank) plus a little full-rank noise. Isotropic Gaussian
    vectors, HNSW's worst case, are no model's output."""
    rng = np.random.default_rng(seed)
    basis = rng.normal(size=(latent, dim)).astype(np.float32) / np.sqrt(latent)
    centres = rng.normal(size=(clusters, latent)).astype(np.float32) * 2
    out = np.empty((n, dim), dtype=np.float32)
    for lo in range(0, n, 50_000):
        m = min(50_000, n - lo)
        points = centres[rng.integers(0, clusters, m)] + rng.normal(size=(m, latent)).astype(np.float32)
        out[lo: lo + m] = points @ basis + 0.1 * rng.normal(size=(m, dim)).astype(np.float32)
    return out


def bench_search(entities: int, dim: int, queries: int, k: int, repeats: int) -> dict:
    from linker.index import ExactIndex, HNSWIndex, IndexConfig

    vectors, q = encodings_like(entities, dim, 0), encodings_like(queries, dim, 1)
    exact = ExactIndex(vectors, chunk_rows=65536)
    exact_s = median_time(lambda: exact.search(q, k), repeats)
    config = IndexConfig(kind="hnsw")
    started = time.perf_counter()
    hnsw = HNSWIndex.build(vectors, config)
    build_s = time.perf_counter() - started
    hnsw_s = median_time(lambda: hnsw.search(q, k), repeats)
    exact_rows, hnsw_rows = exact.search(q, k)[1], hnsw.search(q, k)[1]
    recall = np.mean([len(set(a) & set(b)) / k for a, b in zip(exact_rows, hnsw_rows)])
    return {"entities": entities, "dim": dim, "queries": queries, "k": k,
            "exact_queries_per_s": queries / exact_s, "hnsw_queries_per_s": queries / hnsw_s,
            "hnsw_build_s": build_s, "hnsw_m": config.hnsw_m, "hnsw_ef_search": config.hnsw_ef_search,
            "top1_agreement": float(np.mean(exact_rows[:, 0] == hnsw_rows[:, 0])), f"recall@{k}_vs_exact": float(recall)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="", help="corpus output folder (default: build the sample corpus)")
    parser.add_argument("--sizes", default="tiny", help="comma-separated: tiny, base")
    parser.add_argument("--mentions", type=int, default=100, help="validation mentions linked per run")
    parser.add_argument("--cross_mentions", type=int, default=20, help="of which re-ranked by the cross-encoder (10 pairs each)")
    parser.add_argument("--texts", type=int, default=20, help="texts for detection + linking")
    parser.add_argument("--entities", type=int, default=200_000, help="vectors in the search benchmark")
    parser.add_argument("--dim", type=int, default=256, help="vector width in the search benchmark (BLINK: 1024)")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch default; 1 avoids oversubscribing a shared machine)")
    parser.add_argument("--json", default="", help="write the results to this file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    results = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                           "load_average_at_start": os.getloadavg()[0]},
               "linking": [], "search": None}
    with tempfile.TemporaryDirectory(prefix="bench_linker-") as tmp:
        work = Path(tmp)
        corpus = Path(args.corpus) if args.corpus or args.sizes == "none" else build_sample_corpus(work)
        for size in [s for s in args.sizes.split(",") if s.strip() and s.strip() != "none"]:
            row = bench_linking(corpus, work, size.strip(), args.repeats, args.mentions, args.cross_mentions, args.texts)
            results["linking"].append(row)
            print(json.dumps(row), file=sys.stderr)
    results["search"] = bench_search(args.entities, args.dim, args.queries, 10, args.repeats)
    print(json.dumps(results["search"]), file=sys.stderr)
    text = json.dumps(results, indent=2)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
