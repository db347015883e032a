"""Downstream scores from gold and predicted label ids (numpy; no TensorFlow).

Gold ids of labels training never saw are data.tasks.UNSEEN_LABEL (-1): never predicted, so
they count as errors.
"""

import collections

import numpy as np

from bert_tf.data import ner

# The dev metric that picks the best checkpoint and heads the summary, per task.
MAIN_METRIC = {"cola": "mcc", "mrpc": "f1", "ner": "entity_f1"}


def accuracy(gold: np.ndarray, predicted: np.ndarray) -> float:
    return float(np.mean(gold == predicted)) if len(gold) else 0.0


def matthews_corrcoef(gold: np.ndarray, predicted: np.ndarray, positive: int = 1) -> float:
    """Binary Matthews correlation (CoLA's metric); 0 when a marginal is empty."""
    g, p = gold == positive, predicted == positive
    tp, tn = float(np.sum(g & p)), float(np.sum(~g & ~p))
    fp, fn = float(np.sum(~g & p)), float(np.sum(g & ~p))
    denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def f1(gold: np.ndarray, predicted: np.ndarray, positive: int = 1) -> float:
    """F1 of the positive class (MRPC's metric)."""
    tp = float(np.sum((gold == positive) & (predicted == positive)))
    predicted_positive, gold_positive = float(np.sum(predicted == positive)), float(
        np.sum(gold == positive))
    return 2 * tp / (predicted_positive + gold_positive) if tp else 0.0


def per_label_accuracy(gold: np.ndarray, predicted: np.ndarray, label_names) -> dict:
    """{label: {"accuracy", "count"}} over the gold labels present (unseen ones as "(unseen)")."""
    scores = {}
    for label_id in sorted(set(gold.tolist())):
        name = label_names[label_id] if label_id >= 0 else "(unseen)"
        chosen = gold == label_id
        scores[name] = {"accuracy": accuracy(gold[chosen], predicted[chosen]),
                        "count": int(np.sum(chosen))}
    return scores


def majority_baseline(gold: np.ndarray, train_label_ids) -> float:
    """Accuracy of always predicting training's most frequent label."""
    most_common = collections.Counter(np.asarray(train_label_ids).tolist()).most_common(1)
    return accuracy(gold, np.full_like(gold, most_common[0][0])) if most_common else 0.0


def scores(task_name: str, gold, predicted, label_names, train_label_ids) -> dict:
    """eval_results for one split: accuracy, the task's own metric, the majority baseline and,
    for tagging, accuracy per tag."""
    gold, predicted = np.asarray(gold), np.asarray(predicted)
    result = {"accuracy": accuracy(gold, predicted), "count": int(len(gold)),
              "majority_baseline": majority_baseline(gold, train_label_ids)}
    if task_name == "cola":
        result["mcc"] = matthews_corrcoef(gold, predicted)
    if task_name == "mrpc":
        result["f1"] = f1(gold, predicted)
    if task_name in ("pos", "ner"):
        result["per_tag_accuracy"] = per_label_accuracy(gold, predicted, label_names)
    result["main_metric"] = MAIN_METRIC.get(task_name, "accuracy")
    return result


def unit_predictions(alignments, label_names, predicted) -> list[list[str]]:
    """NER: each sentence's predicted tag per unit, from the flat predicted ids of the scored
    units (`ner.Alignment.heads`, sentence after sentence)."""
    tags, start = [], 0
    for alignment in alignments:
        end = start + len(alignment.heads)
        tags.append(ner.unit_tags(alignment, [label_names[i] for i in predicted[start:end]]))
        start = end
    return tags


def ner_scores(alignments, label_names, predicted, train_label_ids) -> dict:
    """Exact span+type entity micro-F1 (ner.entity_f1) over the input's own units, the same for
    the majority baseline (training's most frequent tag everywhere: O, so F1 0), and the gold
    entities with a boundary inside a piece (which no prediction can get exactly right)."""
    gold = [a.sentence.tags for a in alignments]
    scores = ner.entity_f1(gold, unit_predictions(alignments, label_names, predicted))
    counts = collections.Counter(np.asarray(train_label_ids).tolist()).most_common(1)
    majority = label_names[counts[0][0]] if counts else ner.OUTSIDE
    baseline = ner.entity_f1(gold, [[majority] * len(tags) for tags in gold])
    return {"entity_f1": scores["f1"], "entity_precision": scores["precision"],
            "entity_recall": scores["recall"], "entities": scores["gold"],
            "per_type": scores["per_type"], "majority_tag": majority,
            "majority_baseline_entity_f1": baseline["f1"],
            "entities_with_boundary_inside_piece": sum(a.boundaries_inside for a in alignments)}
