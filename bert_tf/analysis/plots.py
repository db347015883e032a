"""Figures for the attention analysis in the style of Clark et al. 2019, and a
self-contained HTML view of one segment's attention (no network access needed).

Plots read the report dict that bert_tf.statistics.analyze_attention writes to stats.json.
"""

import base64
import html
import importlib.resources
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402

from bert_tf.analysis import statistics  # noqa: E402

COLORS = {"cls": "#e74c3c", "sep": "#3498db", "punct": "#9b59b6", "prev": "#f39c12",
          "self": "#59d98e", "next": "#159d82", "sep_to_sep": "#3498db",
          "other_to_sep": "#95a5a6", "other": "#95a5a6", "entropy": "#34495e",
          "cls_entropy": "#e74c3c"}
LABELS = {"cls": "[CLS]", "sep": "[SEP]", "punct": ". or ,", "prev": "previous token",
          "self": "current token", "next": "next token", "sep_to_sep": "[SEP] -> [SEP]",
          "other_to_sep": "other -> [SEP]", "other": "other tokens",
          "entropy": "all tokens", "cls_entropy": "[CLS]"}
TITLES = {"cls": "to [CLS]", "sep": "to [SEP]", "period": 'to "."', "comma": 'to ","',
          "punct": 'to "." or ","', "next": "to next token", "prev": "to previous token",
          "self": "to itself", "sep_to_sep": "[SEP] to [SEP]", "other_to_sep": "others to [SEP]",
          "entropy": "entropy (nats)", "cls_entropy": "[CLS] entropy (nats)"}


def _layer_scatter(ax, values, key, offset=0.0):
    """One dot per head at its layer (slightly spread), and the layer means."""
    values = np.asarray(values, dtype=float)
    layers, heads = values.shape
    jitter = np.linspace(-0.12, 0.12, heads)
    x = np.arange(1, layers + 1)
    ax.scatter((x[:, None] + offset + jitter[None, :]).ravel(), values.ravel(), s=10,
               color=COLORS[key], alpha=0.6, linewidths=0)
    ax.plot(x + offset, np.nanmean(values, 1), color=COLORS[key], marker="o", lw=2,
            label=LABELS[key])
    ax.set_xticks(x)
    ax.set_xlabel("layer")


def _scatter_figure(path, panels, ylabel, hline=None):
    """panels: list of (title, [keys]) drawn as per-layer scatters side by side."""
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.8), squeeze=False)
    for ax, (title, series) in zip(axes[0], panels, strict=True):
        for i, (key, values) in enumerate(series):
            _layer_scatter(ax, values, key, offset=0.22 * (i - (len(series) - 1) / 2))
        if hline is not None:
            ax.axhline(hline, color="k", ls="--", lw=1, label="uniform attention")
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_heatmaps(head_means, path):
    """Layer x head heatmap of every statistic."""
    names = [n for n in statistics.STATISTICS if n in head_means]
    cols = 4
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax in axes.ravel()[len(names):]:
        ax.axis("off")
    for ax, name in zip(axes.ravel(), names, strict=False):
        values = np.array(head_means[name], dtype=float)
        is_entropy = name in statistics.ENTROPY_STATISTICS
        image = ax.imshow(values, cmap="viridis" if is_entropy else "Blues", aspect="auto",
                          vmin=None if is_entropy else 0.0, vmax=None if is_entropy else 1.0,
                          origin="lower", extent=(0.5, values.shape[1] + 0.5,
                                                  0.5, values.shape[0] + 0.5))
        ax.set_title(TITLES[name])
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_mds(coordinates, behaviours, num_heads, path):
    """The heads embedded in 2-D by MDS of their JS divergences, coloured by
    layer and by behaviour (Clark et al., Figure 6)."""
    xy = np.asarray(coordinates, dtype=float)
    layers = np.arange(len(xy)) // num_heads + 1
    labels = np.asarray(behaviours, dtype=object).ravel()
    fig, (by_layer, by_behaviour) = plt.subplots(1, 2, figsize=(12, 5))
    points = by_layer.scatter(xy[:, 0], xy[:, 1], c=layers, cmap="viridis", s=28)
    fig.colorbar(points, ax=by_layer, label="layer")
    by_layer.set_title("heads by layer")
    palette = plt.get_cmap("tab10")
    for i, label in enumerate(dict.fromkeys(labels)):
        hit = labels == label
        by_behaviour.scatter(xy[hit, 0], xy[hit, 1], s=28, color=palette(i % 10),
                             label=f"{label} ({hit.sum()})")
    by_behaviour.set_title("heads by behaviour")
    by_behaviour.legend(fontsize=8)
    for ax in (by_layer, by_behaviour):
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel("MDS of Jensen-Shannon divergence between heads")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_mlm_gradient(gradient, path):
    """Per layer, mean |d loss / d attention| by attended token (Figure 3)."""
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for key in statistics.GRADIENT_TARGETS:
        values = np.array(gradient[key], dtype=float)
        ax.plot(np.arange(1, len(values) + 1), np.nanmean(values, 1), marker="o",
                color=COLORS[key], label=LABELS[key])
    ax.set_xlabel("layer")
    ax.set_ylabel("mean |gradient| of MLM loss")
    ax.set_title("gradient w.r.t. attention to ...")
    ax.set_xticks(np.arange(1, len(values) + 1))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_dependency(rows, path, most=20):
    """Best head vs best fixed offset per relation (Clark et al., Table 1)."""
    rows = rows[:most]
    y = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(7, 0.32 * len(rows) + 1.4))
    ax.barh(y - 0.2, [r["accuracy"] for r in rows], height=0.4, color="#3498db",
            label="best attention head")
    ax.barh(y + 0.2, [r["baseline_accuracy"] for r in rows], height=0.4, color="#95a5a6",
            label="best fixed offset")
    ax.set_yticks(y, [f"{r['relation']} ({r['layer']}-{r['head']}, n={r['count']})"
                      for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("accuracy at predicting the syntactic head word")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_report(report, directory):
    """Every figure the report has data for, as PNGs under directory."""
    os.makedirs(directory, exist_ok=True)
    stats = report.get("statistics")
    if stats:
        _scatter_figure(os.path.join(directory, "special_tokens.png"), [
            ("average attention to special tokens",
             [(k, stats[k]) for k in ("cls", "sep", "punct")]),
            ("attention to [SEP] from [SEP] / from other tokens",
             [(k, stats[k]) for k in ("sep_to_sep", "other_to_sep")]),
        ], "average attention")
        _scatter_figure(os.path.join(directory, "positional.png"), [
            ("attention by relative position", [(k, stats[k]) for k in ("prev", "self", "next")]),
        ], "average attention")
        _scatter_figure(os.path.join(directory, "entropy.png"), [
            ("entropy of each token's attention", [("entropy", stats["entropy"])]),
            ("entropy of [CLS]'s attention", [("cls_entropy", stats["cls_entropy"])]),
        ], "average entropy (nats)", hline=report["uniform_entropy"])
        plot_heatmaps(stats, os.path.join(directory, "heatmaps.png"))
        plot_mds(report["mds"], report["behaviours"], report["model"]["num_heads"],
                 os.path.join(directory, "head_mds.png"))
    if report.get("mlm_gradient"):
        plot_mlm_gradient(report["mlm_gradient"], os.path.join(directory, "mlm_gradient.png"))
    if report.get("dependency"):
        plot_dependency(report["dependency"]["relations"],
                        os.path.join(directory, "dependency.png"))


# ---------------------------------------------------------------------------
# HTML view

# The page: attention.html beside this file, with __TITLE__ and __DATA__ filled in.
HTML_TEMPLATE = "attention.html"


def write_attention_html(tokens, attention, path, title="Attention"):
    """One segment's maps ([layers, heads, n, n]) as a standalone HTML page.
    The weights travel as base64 bytes (weight x 255) to keep the page small."""
    attention = np.asarray(attention, dtype=np.float32)
    layers, heads, n, _ = attention.shape
    weights = np.clip(np.rint(attention * 255), 0, 255).astype(np.uint8)
    data = {"tokens": list(tokens), "layers": layers, "heads": heads,
            "weights": base64.b64encode(weights.tobytes()).decode("ascii")}
    # "</" would end the script element early; JSON allows escaping the slash.
    payload = json.dumps(data).replace("</", "<\\/")
    template = importlib.resources.files("bert_tf.analysis").joinpath(HTML_TEMPLATE).read_text(
        encoding="utf-8")
    page = template.replace("__TITLE__", html.escape(title)).replace("__DATA__", payload)
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)


def plot_probes(report, names, path):
    """The probes' UAS beside the paper's, and the UPOS accuracy of each layer's word
    vectors, trained and random-init (bert_tf.analysis.probe_syntax)."""
    rows = list(report["uas"])  # none with --nodependency_probes: the UPOS panel alone
    if rows:
        fig, (uas_ax, upos_ax) = plt.subplots(1, 2, figsize=(12, 4.2))
        _plot_uas(uas_ax, report, names, rows)
    else:
        fig, upos_ax = plt.subplots(figsize=(6, 4.2))
    upos = report["upos_accuracy"]
    for key, color, label in (("trained", "#3498db", "this checkpoint"),
                              ("random_init", "#e74c3c", "random init")):
        if upos[key]:
            upos_ax.plot(np.arange(len(upos[key])), upos[key], marker="o", color=color,
                         label=label)
    if upos["majority_tag"] is not None:
        upos_ax.axhline(upos["majority_tag"], color="k", ls="--", lw=1, label="majority tag")
    upos_ax.set_xlabel("layer (0 = embeddings)")
    upos_ax.set_ylabel("UPOS accuracy, linear probe")
    upos_ax.set_ylim(0, 1)
    upos_ax.grid(alpha=0.3)
    upos_ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_uas(ax, report, names, rows):
    y = np.arange(len(rows))
    ax.barh(y - 0.2, [100 * report["uas"][r] for r in rows], height=0.4, color="#3498db",
            label="this checkpoint")
    ax.barh(y + 0.2, [report["paper_uas"].get(r, 0) for r in rows], height=0.4,
            color="#95a5a6", label="Clark et al., BERT-base on WSJ")
    ax.set_yticks(y, [names[r] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("UAS (%), punctuation excluded")
    ax.legend(fontsize=8, loc="lower right")
