"""bench/compare_train.py's results: each row summarised over its interleaved rounds, MFU,
ratios with their per-round spread and verdicts, the targets of issue 38, and the Markdown."""

import common
import rounds

OURS = "bert_tf"
# bert_tf of an earlier checkout (compare_train --baseline): neither ours nor a peer.
BASELINE = "bert_tf-baseline"
# Which matmul peak an MFU is measured against.
PEAK_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "amp": "bfloat16"}


def row_label(row):
    return f"{row['framework']} {row['precision']} XLA {'on' if row['xla'] else 'off'}"


def payload(info, peaks, rows, scaling):
    """The results file's content. peaks: {"start": {dtype: FLOP/s}, "end": ...}; MFU is
    measured against the better of the two (on a shared machine, the closer to the hardware)."""
    best_peak = {dtype: max(p[dtype] for p in peaks.values()) for dtype in peaks["start"]}
    for row in rows:
        row["summary"] = rounds.row_summary(row["rounds"], row["batch_size"])
        if row["summary"]:
            flops = row["rounds"][0]["train_flops_per_sequence"]
            row["mfu"] = common.mfu(flops, row["summary"]["sequences_per_s"]["median"],
                                    best_peak[PEAK_DTYPE[row["precision"]]])
    return {"info": info, "peaks": peaks, "peak_flops": best_peak, "rows": rows,
            "scaling": scaling, "comparisons": comparisons(rows),
            "targets": targets(rows, scaling)}


def _measured(rows, shape, framework=None, precision=None, xla=None, peers=False):
    return [r for r in rows if r.get("summary") and r["shape"] == shape
            and (framework is None or r["framework"] == framework)
            and (precision is None or r["precision"] == precision)
            and (xla is None or r["xla"] == xla)
            and (r["framework"] not in (OURS, BASELINE) if peers else True)]


def _best(rows):
    """The row with the highest median sequences/s, or None."""
    return max(rows, key=lambda r: r["summary"]["sequences_per_s"]["median"], default=None)


def _versus(name, mine, theirs):
    if not (mine and theirs):
        return None
    result = rounds.compare(mine["rounds"], theirs["rounds"])
    return result and {"name": f"{name}: {row_label(mine)} / {row_label(theirs)}", **result}


def comparisons(rows):
    """Per shape: ours' best rows against the best peer row, and bf16 against fp32."""
    out = {}
    for shape in sorted({r["shape"] for r in rows}):
        best_peer = _best(_measured(rows, shape, peers=True))
        entries = [
            _versus("ours best / best peer", _best(_measured(rows, shape, OURS)), best_peer),
            _versus("ours best bf16 / best peer", _best(_measured(rows, shape, OURS, "bf16")),
                    best_peer),
            _versus("ours best fp32 / best peer fp32",
                    _best(_measured(rows, shape, OURS, "fp32")),
                    _best(_measured(rows, shape, precision="fp32", peers=True))),
        ]
        for xla in (False, True):
            entries.append(_versus(f"ours bf16 / fp32, XLA {'on' if xla else 'off'}",
                                   _best(_measured(rows, shape, OURS, "bf16", xla)),
                                   _best(_measured(rows, shape, OURS, "fp32", xla))))
        for precision in ("fp32", "bf16", "fp16", "amp"):
            for xla in (False, True):
                entries.append(_versus(
                    "ours / baseline", _best(_measured(rows, shape, OURS, precision, xla)),
                    _best(_measured(rows, shape, BASELINE, precision, xla))))
        out[shape] = [e for e in entries if e]
    return out


def targets(rows, scaling):
    """Issue 38's targets for BERT-base (or the first shape measured in a run without it)."""
    shapes = [r["shape"] for r in rows if r["framework"] == OURS and r.get("summary")]
    if not shapes:
        return {}
    shape = "base" if "base" in shapes else shapes[0]
    result = {}
    for entry in comparisons(rows).get(shape, []):
        if entry["name"].startswith("ours best bf16 / best peer"):
            result[f"ours best bf16 >= 1.1x best peer, every round > 1.0 ({shape})"] = {
                "value": entry["ratio"], "met": entry["ratio"] >= 1.1 and entry["min"] > 1.0}
        if entry["name"].startswith("ours bf16 / fp32"):
            xla = "on" if "XLA on:" in entry["name"] else "off"
            result[f"ours bf16 >= 1.4x fp32, XLA {xla} ({shape})"] = {
                "value": entry["ratio"], "met": entry["ratio"] >= 1.4}
    bf16 = _best(_measured(rows, shape, OURS, "bf16"))
    if bf16:
        result[f"ours bf16 MFU >= 45% of the bf16 peak ({shape}, {row_label(bf16)})"] = {
            "value": bf16["mfu"], "met": bf16["mfu"] >= 0.45}
    ok = [s for s in scaling if "sequences_per_s" in s]
    if len(ok) == 2:
        value = ok[1]["sequences_per_s"] / ok[0]["sequences_per_s"]
        result["2 ranks x 1 thread within 10% of 1 x 2 (seq/s ratio, one pass)"] = {
            "value": value, "met": value >= 0.9}
    return result


def _range(spread, scale=1.0, digits=3):
    return (f"{spread['median'] * scale:.{digits}g} ({spread['min'] * scale:.{digits}g}-"
            f"{spread['max'] * scale:.{digits}g})")


def _table(rows):
    headers = ["shape", "framework", "precision", "XLA", "batch", "rounds", "step s median (min-max)",
               "seq/s median (min-max)", "MFU", "load (min-max)", "peak RSS MiB", "note"]
    table = []
    for r in rows:
        s = r.get("summary")
        note = r["error"].splitlines()[0][:80] if "error" in r else r.get("skipped", "")
        rss = max((x["peak_rss_mib"] for x in r["rounds"] if "peak_rss_mib" in x), default=None)
        table.append([r["shape"], r["framework"], r["precision"], "on" if r["xla"] else "off",
                      r["batch_size"], s and s["rounds"], s and _range(s["step_s"]),
                      s and _range(s["sequences_per_s"]),
                      f"{r['mfu']:.1%}" if "mfu" in r else None,
                      s and _range(s["load_average"], digits=2), rss, note])
    return common.markdown_table(headers, table)


def render(payload):
    info, peaks = payload["info"], payload["peaks"]
    peak_text = "; ".join(
        f"{when}: fp32 {p['float32'] / 1e9:.0f}, bf16 {p['bfloat16'] / 1e9:.0f} GFLOP/s"
        for when, p in peaks.items())
    lines = [
        "# Training step: bert_tf vs Hugging Face (PyTorch) vs TF Model Garden", "",
        f"Machine: {info['machine_at_start']['cpu']}, {info['machine_at_start']['cpu_count']} "
        f"CPUs; load average at start {info['machine_at_start']['load_average']}, at end "
        f"{info['machine_at_end']['load_average']} (a shared machine: noisy numbers). "
        f"{info['rounds']} interleaved rounds per shape; each row's figure is the median of its "
        "rounds (min-max in brackets).",
        f"TF matmul peak measured at {peak_text}. MFU = train FLOPs/sequence x median "
        "sequences/s / the better peak of the row's precision (bf16 peak for bf16 rows, also "
        "for the peers). Train FLOPs = 3 x forward matmul FLOPs (formula in bench/common.py).",
        rounds.steady_line([r["rounds"] for r in payload["rows"]]),
        "", _table(payload["rows"]), ""]
    for r in payload["rows"]:
        first = r["rounds"][0] if r["rounds"] else {}
        if "fwd_bwd_s" in first:
            lines.append(f"Where the time goes ({r['shape']} {row_label(r)}, per update, "
                         f"parts timed apart once): forward+backward {first['fwd_bwd_s']:.3g}s, "
                         f"allreduce {first['allreduce_s']:.3g}s, clip+optimizer "
                         f"{first['optimizer_s']:.3g}s.")
    lines += ["", "## Ratios (sequences/s, ratio of medians, per-round min-max)", ""]
    for shape, entries in payload["comparisons"].items():
        lines += [f"- {shape}: " + rounds.verdict_line(e["name"], e) for e in entries]
    if payload["scaling"]:
        lines += ["", "## Scaling under horovodrun --gloo (ours, fp32, same global batch, one "
                  "pass)", ""]
        table = [[s["num_ranks"], s["threads_per_rank"], s["batch_per_rank"], s.get("step_s"),
                  s.get("sequences_per_s"),
                  f"{s['allreduce_share']:.1%}" if "allreduce_share" in s else None,
                  " / ".join(f"{m:.0f}" for m in s.get("peak_rss_mib_per_rank", [])),
                  s.get("error", "")[:80]]
                 for s in payload["scaling"]]
        lines.append(common.markdown_table(
            ["ranks", "threads/rank", "batch/rank", "step s", "seq/s", "allreduce share",
             "peak RSS MiB per rank", "note"], table))
    lines += ["", "## Targets", ""]
    for name, t in payload["targets"].items():
        lines.append(f"- {name}: {t['value']:.2f} -> {'met' if t['met'] else 'MISSED'}")
    return "\n".join(lines)
