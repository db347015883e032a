"""Writing a report's files: JSON without NaN, CSV tables, and analyze_attention's report
(stats.json, tables/*.csv, plots/*.png, attention_example.html)."""

import csv
import json
import math
import os

from bert_tf.analysis import plots
from bert_tf.data.output_dir import replace_files_in

# Everything analyze_attention writes in --output_dir (an earlier run's are replaced or removed:
# a table or plot this run lacks, e.g. without a gradient, would mislead).
ATTENTION_REPORT_FILES = ("stats.json", "tables/*.csv", "plots/*.png", "attention_example.html")


def write_json(path, value):
    """Standard JSON (a NaN or inf is written as null)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(json_safe(value), f, indent=1, allow_nan=False)



def json_safe(value):
    """NaN/inf -> None, recursively, so the JSON is standard."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def write_csv(path, header, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def _write_layer_head_table(path, table):
    heads = len(table[0])
    write_csv(path, ["layer", *[f"head_{h + 1}" for h in range(heads)]],
               [[layer + 1, *row] for layer, row in enumerate(table)])


def _write_attention_tables(report, directory):
    os.makedirs(directory)
    for name, table in report.get("statistics", {}).items():
        _write_layer_head_table(os.path.join(directory, f"{name}.csv"), table)
    for target, table in (report.get("mlm_gradient") or {}).items():
        _write_layer_head_table(os.path.join(directory, f"mlm_gradient_{target}.csv"), table)
    if "behaviours" in report:
        _write_layer_head_table(os.path.join(directory, "behaviours.csv"), report["behaviours"])
        heads = report["model"]["num_heads"]
        labels = [f"{i // heads + 1}-{i % heads + 1}" for i in range(len(report["mds"]))]
        write_csv(os.path.join(directory, "js_divergence.csv"), ["head", *labels],
                   [[label, *row] for label, row in zip(labels, report["js_divergence"],
                                                        strict=True)])
        write_csv(os.path.join(directory, "mds.csv"), ["head", "layer", "x", "y"],
                   [[label, i // heads + 1, *xy]
                    for i, (label, xy) in enumerate(zip(labels, report["mds"], strict=True))])
    if report.get("dependency"):
        rows = report["dependency"]["relations"]
        write_csv(os.path.join(directory, "dependency.csv"), list(rows[0]),
                   [list(row.values()) for row in rows])


def write_attention_report(report, example, output_dir):
    """Writes analyze_attention's report in a staging directory inside output_dir, then moves
    it in and removes an earlier run's files this one lacks: a failure leaves no partial
    report, a rerun no stale one."""
    report = json_safe(report)
    with replace_files_in(output_dir, ATTENTION_REPORT_FILES) as staging:
        write_json(os.path.join(staging, "stats.json"), report)
        _write_attention_tables(report, os.path.join(staging, "tables"))
        plots.plot_report(report, os.path.join(staging, "plots"))
        if example is not None:
            tokens, maps = example
            plots.write_attention_html(
                tokens, maps, os.path.join(staging, "attention_example.html"),
                title=f"Attention of {os.path.basename(report['checkpoint'].rstrip('/'))}")
