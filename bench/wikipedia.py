"""Wikipedia dump -> documents -> phase-1 TFRecords: ours against WikiExtractor, per core.

The input is SYNTHETIC in size: the real 206-page English slice in ../shared/data/wikipedia/
with its pages repeated --repeat times (titles and ids made unique), written as one .xml.bz2
dump, so that start-up costs are amortised as they are on a 20 GB dump.

1. Extraction, one process each, same dump: `python -m bert_tf wikipedia` (wikitext -> prose
   and sentence splitting) against WikiExtractor (`wikiextractor` from PyPI, `--processes 1
   -b 100M` as NVIDIA's bertPrep.py runs it, no sentence splitting), in its own venv outside
   the repo (bench/setup_peers.sh wikiextractor). CPU seconds (user+sys of the process tree)
   give MB of XML per CPU-second, i.e. per core; cleanliness is leftover markup per MB of text.
2. End to end: `python -m bert_tf prepare_dataset --num_workers=1`, phase 1 only
   (--phases=128:20) and both phases (NVIDIA's dupe factor 5): MB of XML per CPU-second and
   peak RSS, and the projection to full English Wikipedia (--full_xml_gb, about 20 GB of XML)
   on one --cores_per_node node and on --nodes nodes, assuming the per-core rate holds (the
   work is per shard and independent). Also the serial part: streaming one dump file (bz2 and
   XML parsing) bounds stage 1 of a single-file dump, whatever the core count; NVIDIA's 27
   pages-articlesN files spread it over ranks.

    python bench/wikipedia.py [--repeat 4] [--cores_per_node 64] [--nodes 8]
"""

import argparse
import bz2
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import markdown_table, write_results  # noqa: E402
from create_data import run_measured  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SLICE = (REPO.parent / "shared/data/wikipedia/"
         "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
VENVS = Path(os.environ.get("BENCH_VENVS", Path.home() / ".cache/bert_tf/bench-venvs"))
MARKUP = ("{{", "[[", "|}", "<ref", "&nbsp;")


def synthetic_dump(path, repeat):
    """The slice's pages `repeat` times (titles made unique) -> .xml.bz2; returns the XML size
    in bytes. Made in a child process: the measured commands are forked from this one, and a
    fork's peak RSS starts at its parent's."""
    code = (f"import sys; sys.path.insert(0, {str(REPO / 'bench')!r}); import wikipedia; "
            f"print(wikipedia.write_synthetic_dump({str(path)!r}, {repeat}))")
    return int(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                              text=True).stdout)


def write_synthetic_dump(path, repeat):
    raw = bz2.open(SLICE).read().decode("utf-8")
    start, end = raw.index("  <page>"), raw.rindex("</page>") + len("</page>")
    pages = raw[start:end]
    parts = [raw[:start]]
    for copy in range(repeat):
        parts.append(re.sub(r"<title>(.*?)</title>", rf"<title>\1 {copy}</title>", pages))
    parts.append("\n</mediawiki>\n")
    xml = "".join(parts).encode("utf-8")
    with bz2.open(path, "wb") as f:
        f.write(xml)
    return len(xml)


def markup_per_mb(text):
    megabytes = max(len(text.encode("utf-8")) / 1e6, 1e-9)
    return {mark: text.count(mark) / megabytes for mark in MARKUP}, megabytes


def read_tree(directory, skip_doc_tags=False):
    texts = []
    for root, _, names in os.walk(directory):
        for name in sorted(names):
            if name.endswith(".json") or name.endswith(".tmp"):
                continue
            text = Path(root, name).read_text(encoding="utf-8")
            if skip_doc_tags:  # WikiExtractor's <doc ...> and </doc> wrapper lines
                text = "\n".join(line for line in text.split("\n")
                                 if not line.startswith(("<doc ", "</doc>")))
            texts.append(text)
    return "".join(texts)


def ensure_wikiextractor():
    python = VENVS / "wikiextractor/bin/python"
    if not (VENVS / "wikiextractor/.bench-installed").exists():
        subprocess.run(["bash", str(REPO / "bench/setup_peers.sh"), "wikiextractor"], check=True)
    return python


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=4, help="copies of the slice's pages")
    parser.add_argument("--vocab_file",
                        default=str(REPO.parent / "shared/data/vocab/bert-base-uncased.txt"))
    parser.add_argument("--full_xml_gb", type=float, default=20.0)
    parser.add_argument("--cores_per_node", type=int, default=64)
    parser.add_argument("--nodes", type=int, default=8)
    args = parser.parse_args()
    wikiextractor = ensure_wikiextractor()
    python = sys.executable
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    with tempfile.TemporaryDirectory(prefix="bench-wikipedia-") as work:
        work = Path(work)
        dump = work / "enwiki-synthetic-pages-articles.xml.bz2"
        xml_mb = synthetic_dump(dump, args.repeat) / 1e6
        rows, record = [], {"xml_mb": xml_mb, "repeat": args.repeat, "load": os.getloadavg()}
        runs = {
            "bert_tf wikipedia": ([python, "-m", "bert_tf", "wikipedia", f"--input_files={dump}",
                                   f"--output_dir={work / 'ours'}", "--noprogress"],
                                  work / "ours", False),
            "WikiExtractor 3.1.0": ([wikiextractor, "-m", "wikiextractor.WikiExtractor", dump,
                                     "-o", work / "wikiextractor", "-b", "100M",
                                     "--processes", "1", "-q"], work / "wikiextractor", True),
        }
        for name, (cmd, out, doc_tags) in runs.items():
            wall, cpu, rss, _ = run_measured(cmd, env=env)
            counts, text_mb = markup_per_mb(read_tree(out, doc_tags))
            record[name] = {"wall_s": wall, "cpu_s": cpu, "peak_rss_mib": rss,
                            "xml_mb_per_cpu_s": xml_mb / cpu, "text_mb": text_mb,
                            "markup_per_mb": counts}
            rows.append([name, xml_mb / cpu, cpu, wall, rss, text_mb,
                         *(counts[m] for m in MARKUP)])
        extraction = markdown_table(
            ["extraction", "XML MB/s per core", "CPU s", "wall s", "peak RSS MiB", "text MB",
             *(f"`{m}`/MB" for m in MARKUP)], rows)
        rows = []
        for phases in ("128:20", "128:20,512:80"):
            wall, cpu, rss, _ = run_measured(
                [python, "-m", "bert_tf", "prepare_dataset", f"--input_files={dump}",
                 f"--output_dir={work / phases}", f"--vocab_file={args.vocab_file}",
                 f"--phases={phases}", "--num_workers=1", "--noprogress"], env=env)
            rate = xml_mb / cpu
            node_hours = args.full_xml_gb * 1e3 / rate / args.cores_per_node / 3600
            record[f"end_to_end_{phases}"] = {
                "wall_s": wall, "cpu_s": cpu, "peak_rss_mib": rss, "xml_mb_per_cpu_s": rate,
                "projection_hours_one_node": node_hours,
                "projection_hours_nodes": node_hours / args.nodes}
            rows.append([f"prepare_dataset --phases={phases} (dupe 5)", rate, cpu, rss,
                         f"{node_hours:.2f} h", f"{node_hours / args.nodes:.3f} h"])
        end_to_end = markdown_table(
            ["dump -> TFRecords", "XML MB/s per core", "CPU s", "peak RSS MiB",
             f"{args.full_xml_gb:g} GB on 1x{args.cores_per_node} cores",
             f"on {args.nodes}x{args.cores_per_node}"], rows)
        started = os.times()
        code = ("import sys; from bert_tf.data import wikipedia as w; "
                "print(sum(1 for _ in w.iter_dump(sys.argv[1])))")
        subprocess.run([python, "-c", code, dump], env=env, check=True, capture_output=True)
        ended = os.times()
        stream_cpu = (ended.children_user + ended.children_system
                      - started.children_user - started.children_system)
        record["dump_streaming_mb_per_cpu_s"] = xml_mb / stream_cpu
        end_to_end += (f"\n\nStreaming one dump (bz2 + XML parse, serial per dump file): "
                       f"{xml_mb / stream_cpu:.1f} MB/s (a single-file dump's stage 1 is bound by "
                       f"it: {args.full_xml_gb * 1e3 / (xml_mb / stream_cpu) / 3600:.2f} h for "
                       f"{args.full_xml_gb:g} GB).")
    markdown = (f"Synthetic dump: the 206-page English slice x{args.repeat} = {xml_mb:.1f} MB "
                f"of XML; load average at start {record['load'][0]:.1f}.\n\n"
                f"{extraction}\n\n{end_to_end}\n")
    print(markdown)
    for path in write_results("wikipedia", record, markdown):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
