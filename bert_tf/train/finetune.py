"""Fine-tuning: a task head on a pretrained BERT, trained with pretraining's update machinery.

`FinetuningState` is a `TrainState` (bert_tf/train/state.py) for a classifier from
bert_tf/model/tasks.py, so fine-tuning has the same allreduce, gradient accumulation,
precision and loss scaling, XLA, clipping and warmup + linear decay as pretraining, with Google's
fine-tuning optimizer (AdamW without bias correction). The loss of an update is the mean over
every labelled row (tagging: every word) of every micro-batch on every rank, so 2 ranks x batch
b equals 1 rank x batch 2b.

The run: read and encode the task's splits (bert_tf/data/tasks.py), initialise from
--init_checkpoint, train for --num_train_epochs (metrics.jsonl as pretraining's), evaluate on dev
after every epoch and keep the best weights in OUTPUT_DIR/best, then write eval_results.json
(from the best weights), predictions.tsv for --do_predict, and a one-line summary.

Training runs through pretraining's loop (loop.train_loop) and set-up (run_setup.py,
resume.py): the output-dir lock, a checkpoint after every epoch (after its dev evaluation), stop
on SIGTERM/SIGINT with a checkpoint, and a rerun of the same command resumes from the newest
readable checkpoint at the same update and batch, with the best dev score read back from
OUTPUT_DIR/best.
"""

import dataclasses
import os
import time

import numpy as np
import tensorflow as tf

from bert_tf.data import ner, tasks, tokenization
from bert_tf.data.conllu import ConlluError
from bert_tf.data.tokenization import FullTokenizer, check_vocab_size
from bert_tf.model import checkpoints, modeling
from bert_tf.model.tasks import (
    CLASSIFICATION_SUMS,
    BertForSequenceClassification,
    BertForTokenClassification,
    classification_metrics,
    classification_sums,
)
from bert_tf.train import distributed, evaluation, loop, precision, resume, run_setup
from bert_tf.train.finetune_config import FinetuningConfig, FinetuningConfigError
from bert_tf.train.report import Reporter, write_json
from bert_tf.train.state import TrainState

# What `python -m bert_tf export` needs besides the weights (bert_tf/tools/export_source.py).
MODEL_INFO = "finetuned_model.json"
LOGGED_METRICS = ("loss", "accuracy", "learning_rate", "loss_scale", "grad_norm")
BEST_DIR = "best"
BEST_SCORE = "best_dev_score"  # saved with the best weights: a resumed run compares with it
# The newest checkpoint and one to fall back on if it does not read back.
KEEP_CHECKPOINTS = 2
# Word embeddings this many times initializer_range in RMS get a warning without
# --rescale_embeddings: the budget recipe's LAMB pretraining leaves 5-24x (docs/budget.md).
EMBEDDINGS_LARGE = 4.0


class FinetuningState(TrainState):
    """TrainState for a sequence or token classifier: mean cross-entropy over labelled rows."""

    def __init__(self, bert_config, config: FinetuningConfig, num_labels: int):
        head = (BertForTokenClassification if config.task_name in tasks.TAGGING_TASKS
                else BertForSequenceClassification)
        model = head(bert_config, num_labels, precision.compute_dtype(config.precision))
        # A tagger reads no pooled output: its pooler gets no step, so AdamW's weight decay
        # does not shrink what the checkpoint hands on (TrainState's `untrained`).
        untrained = (modeling.POOLER_SCOPE,) if head is BertForTokenClassification else ()
        super().__init__(model, config, CLASSIFICATION_SUMS, name="finetuning",
                         untrained=untrained)
        self.predicted_ids = tf.function(self._predicted_ids, jit_compile=config.use_xla,
                                         autograph=False)

    def loss_sums(self, features, dropout_seed) -> dict:
        logits = self.model(features, training=True, dropout_seed=dropout_seed)
        return classification_sums(logits, features["label_ids"], features["label_weights"])

    def objective(self, sums, totals):
        """totals = [labelled rows] of the update per micro-batch (TrainState)."""
        return tf.math.divide_no_nan(sums["loss_sum"], totals[0])

    def local_totals(self, micro_batches) -> tf.Tensor:
        return tf.stack([tf.add_n([tf.reduce_sum(tf.cast(b["label_weights"], tf.float32))
                                   for b in micro_batches])])

    def metrics_from_sums(self, sums) -> dict:
        return classification_metrics(sums)

    def _predicted_ids(self, features):
        return tf.argmax(self.model(features, training=False), axis=-1, output_type=tf.int32)


@dataclasses.dataclass
class TaskData:
    label_names: list
    train: tasks.Encoded | None
    dev: tasks.Encoded | None
    test: tasks.Encoded | None
    test_inputs: list  # test examples or sentences, for the predictions file


# --------------------------------------------------------------------------- the run


def run(config: FinetuningConfig) -> dict:
    """Fine-tunes, evaluates and predicts as the config says; returns the summary."""
    config.validate()
    distributed.init()
    distributed.pin_gpu_to_local_rank(config.deterministic)
    with run_setup.claimed_output_dir(config.output_dir) as report:
        bert_config = run_setup.load_bert_config(config.bert_config_file, config.max_seq_length)
        if config.reinit_top_layers > bert_config.num_hidden_layers:
            raise FinetuningConfigError(
                f"--reinit_top_layers={config.reinit_top_layers} is more than the "
                f"{bert_config.num_hidden_layers} layers of --bert_config_file="
                f"{config.bert_config_file}")
        tokenizer = load_tokenizer(config, bert_config.vocab_size)
        run_setup.enable_amp(config, report)
        data = load_task_data(config, tokenizer, report)
        if config.do_train:
            config = config.with_schedule(data.train.num_rows, distributed.size())
        # After the last check of the flags against the data: a refused run writes nothing.
        write_model_info(config, bert_config, data.label_names, tokenizer.do_lower_case, report)
        tf.random.set_seed(config.seed)
        state = FinetuningState(bert_config, config, len(data.label_names))
        if config.do_train:
            resume.resume_or_initialise(state, config, report, _initialise)
        else:
            _initialise(state, config, report)
            distributed.broadcast_variables(list(state.checkpoint_variables().values()))
        summary = {"task_name": config.task_name, "labels": data.label_names,
                   "tokenizer_spec": tokenizer.spec.to_json()}
        if config.do_train:
            summary["train"] = train(state, config, data, report)
            if summary["train"]["stopped_by"]:
                return summary
            _restore_best(state, config, report)
        if config.do_eval:
            summary["eval"] = evaluate(state, config, data.dev, data, "dev")
            report.summary("eval_results", summary["eval"])
        if config.do_predict:
            write_predictions(state, config, data, report)
        report.log(f"table row: {table_row(config, summary)}")
        return summary


def train(state: FinetuningState, config: FinetuningConfig, data: TaskData,
          report: Reporter) -> dict:
    """--num_train_epochs of updates (from a resumed run's step on); dev evaluation after every
    epoch keeps the best, then a checkpoint is saved."""
    num_ranks = distributed.size()
    global_batch = config.global_batch_size(num_ranks)
    steps_per_epoch = max(1, data.train.num_rows // global_batch)
    best = BestDev(state, config, data, report, steps_per_epoch)
    summary = {"global_step": state.step, "ranks": num_ranks, "stopped_by": None,
               "train_seconds": 0.0, "best_dev": best.best}
    if loop.nothing_to_train(state, config, report):
        return summary
    report.log(f"fine-tuning {config.task_name}: {data.train.num_rows} rows, "
               f"{config.num_train_steps} updates of {global_batch} ({num_ranks} rank(s)), "
               f"{config.num_warmup_steps} warmup, {config.precision}, xla={config.use_xla}")
    batches = tasks.train_batches(data.train.features, config.train_batch_size,
                                  distributed.rank(), num_ranks, config.num_accumulation_steps,
                                  config.seed, skip_batches=int(state.input_position.numpy()))
    plan = loop.LoopPlan(global_batch, LOGGED_METRICS, steps_per_epoch, KEEP_CHECKPOINTS,
                         log_fields=lambda step: {"epoch": step / steps_per_epoch},
                         after_step=best.after_step)
    started = time.perf_counter()
    outcome = loop.train_loop(state, batches, config, report, plan)
    summary.update({**outcome.meter.summary(0), "global_step": state.step,
                    "stopped_by": outcome.stopped_by,
                    "train_seconds": time.perf_counter() - started,
                    "final_loss": outcome.metrics["loss"], "best_dev": best.best})
    for key in ("time_to_train_sequences", "time_to_train_hours"):
        summary.pop(key)
    report.summary("train_summary", summary)
    return summary


class BestDev:
    """With --do_eval: scores dev after every epoch and the last update, and saves the weights
    to OUTPUT_DIR/best when the task's main metric improved. A resumed run starts from the
    score saved there, so it keeps the same best weights as an uninterrupted run."""

    def __init__(self, state, config, data, report, steps_per_epoch: int):
        self.state, self.config, self.data, self.report = state, config, data, report
        self.steps_per_epoch = steps_per_epoch
        self.directory = os.path.join(config.output_dir, BEST_DIR)
        self.best = self._saved_best() if state.step > 0 else None
        if self.best:
            report.log(f"best dev {self.best['metric']} so far {self.best['value']:.4f} "
                       f"(step {self.best['step']})")

    def _saved_best(self) -> dict | None:
        prefix = checkpoints.latest_checkpoint(self.directory)
        score = checkpoints.checkpoint_tensor(prefix, BEST_SCORE) if prefix else None
        if score is None:
            return None
        metric = evaluation.MAIN_METRIC.get(self.config.task_name, "accuracy")
        return {"step": int(prefix.rsplit("-", 1)[1]), "metric": metric, "value": float(score)}

    def after_step(self, step: int) -> None:
        config = self.config
        if config.do_eval and (step % self.steps_per_epoch == 0 or step == config.num_train_steps):
            self._keep_if_best()

    def _keep_if_best(self) -> None:
        state = self.state
        scores = evaluate(state, self.config, self.data.dev, self.data, "dev")
        metric = scores["main_metric"]
        self.report.log(f"step {state.step}: dev {metric} {scores[metric]:.4f}")
        if self.best is not None and scores[metric] <= self.best["value"]:
            return
        if self.report.enabled:
            tensors = {**state.params, BEST_SCORE: tf.constant(scores[metric], tf.float64)}
            checkpoints.save_checkpoint(tensors, self.directory, state.step, keep_max=1)
        self.best = {"step": state.step, "metric": metric, "value": scores[metric]}


def _restore_best(state, config, report) -> None:
    """The best dev weights (if --do_eval kept any) for the final eval and predictions."""
    best_dir = os.path.join(config.output_dir, BEST_DIR)
    if report.enabled and checkpoints.latest_checkpoint(best_dir):
        checkpoints.restore(best_dir, state.params, require_all=True)
        report.log(f"using the best dev weights: {checkpoints.latest_checkpoint(best_dir)}")
    distributed.broadcast_variables(list(state.params.values()))


# --------------------------------------------------------------------------- eval and predict


def predict(state: FinetuningState, features: dict, batch_size: int) -> np.ndarray:
    """Argmax label ids of every row ([N] or [N, S]); the last batch is padded to full size
    (one traced shape)."""
    names = ("input_ids", "input_mask", "segment_ids")
    num_rows = len(features["input_ids"])
    predicted = []
    for i in range(0, num_rows, batch_size):
        batch = {n: features[n][i:i + batch_size] for n in names}
        rows = len(batch["input_ids"])
        batch = {n: np.pad(v, [(0, batch_size - rows)] + [(0, 0)] * (v.ndim - 1))
                 for n, v in batch.items()}
        predicted.append(state.predicted_ids(batch).numpy()[:rows])
    return np.concatenate(predicted)


def gold_and_predicted(state, config, encoded: tasks.Encoded):
    """Flat gold and predicted ids of the scored items (words for tagging, rows otherwise)."""
    predicted = predict(state, encoded.features, config.eval_batch_size)
    gold = encoded.features["eval_label_ids"]
    if config.task_name in tasks.TAGGING_TASKS:
        starts = encoded.features["word_starts"] > 0
        return gold[starts], predicted[starts]
    return gold, predicted


def evaluate(state, config, encoded: tasks.Encoded, data: TaskData, split: str) -> dict:
    """eval_results of `split` (evaluation.scores), the majority baseline from training's
    labels."""
    gold, predicted = gold_and_predicted(state, config, encoded)
    train_ids = data.train.features["eval_label_ids"] if data.train else gold
    if config.task_name in tasks.TAGGING_TASKS and data.train:
        train_ids = train_ids[data.train.features["word_starts"] > 0]
    result = {"split": split, **evaluation.scores(config.task_name, gold, predicted,
                                                  data.label_names, train_ids)}
    if config.task_name == "ner":
        result.update(evaluation.ner_scores(encoded.alignments, data.label_names, predicted,
                                            train_ids))
    return result


def write_predictions(state, config, data: TaskData, report: Reporter) -> None:
    """OUTPUT_DIR/predictions.tsv: `index<TAB>label` per test example (GLUE's submission
    format), for pos `word<TAB>tag` per word, for ner `unit<TAB>gold<TAB>predicted` per input
    token or character (conlleval's columns), with a blank line after each sentence."""
    _, predicted = gold_and_predicted(state, config, data.test)
    names = [data.label_names[i] for i in predicted.tolist()]
    path = os.path.join(config.output_dir, "predictions.tsv")
    if not report.enabled:
        return
    with open(path, "w", encoding="utf-8") as f:
        if config.task_name == "ner":
            units = evaluation.unit_predictions(data.test.alignments, data.label_names,
                                                predicted)
            for alignment, tags in zip(data.test.alignments, units, strict=True):
                sentence = alignment.sentence
                f.writelines(f"{unit}\t{gold}\t{tag}\n" for unit, gold, tag
                             in zip(sentence.units, sentence.tags, tags, strict=True))
                f.write("\n")
            names = [tag for tags in units for tag in tags]
        elif config.task_name in tasks.TAGGING_TASKS:
            words = iter(names)
            for sentence in data.test_inputs:
                f.writelines(f"{word}\t{next(words)}\n" for word in sentence.words)
                f.write("\n")
        else:
            f.write("index\tprediction\n")
            f.writelines(f"{i}\t{name}\n" for i, name in enumerate(names))
    report.log(f"wrote {len(names)} predictions to {path}")


def table_row(config: FinetuningConfig, summary: dict) -> str:
    """One Markdown table row: task | init | dev metric | epochs | train time | ranks."""
    init = config.init_checkpoint or "random init"
    row = [config.task_name, init]
    if "eval" in summary:
        metric = summary["eval"]["main_metric"]
        row.append(f"dev {metric} {100 * summary['eval'][metric]:.2f}")
    if "train" in summary:
        row += [f"{config.num_train_epochs:g} epochs",
                f"{summary['train']['train_seconds']:.0f} s",
                f"{summary['train']['ranks']} rank(s)"]
    return "| " + " | ".join(row) + " |"


# --------------------------------------------------------------------------- set-up


def write_model_info(config: FinetuningConfig, bert_config, label_names: list,
                     do_lower_case: bool, report: Reporter) -> None:
    """OUTPUT_DIR/finetuned_model.json: the task, its labels in id order, the model config,
    the vocab and how text was tokenized: what an export of the checkpoints needs."""
    if report.enabled:
        write_json(os.path.join(config.output_dir, MODEL_INFO), {
            "task_name": config.task_name,
            "tagging": config.task_name in tasks.TAGGING_TASKS,
            "labels": list(label_names),
            "max_seq_length": config.max_seq_length,
            "do_lower_case": do_lower_case,  # as the vocab's spec and the flag decided
            "vocab_file": os.path.abspath(config.vocab_file),
            "bert_config": bert_config.to_dict()})


def load_tokenizer(config: FinetuningConfig, vocab_size: int) -> FullTokenizer:
    """The tokenizer of --vocab_file (as its tokenizer spec says), checked against the model's
    vocab size."""
    tokenizer = tokenization.load_tokenizer(config.vocab_file, config.do_lower_case,
                                            config.allow_dictionary_mismatch)
    check_vocab_size(tokenizer, vocab_size, f"--bert_config_file={config.bert_config_file}")
    if config.init_checkpoint:
        _check_checkpoint_vocab(config.init_checkpoint, tokenizer.vocab_size, config.vocab_file)
    return tokenizer


def _check_checkpoint_vocab(init_checkpoint: str, vocab_size: int, vocab_file: str) -> None:
    prefix = checkpoints.resolve_checkpoint(init_checkpoint)
    shapes = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    table = shapes.get("bert/embeddings/word_embeddings")
    if table and table[0] != vocab_size:
        raise FinetuningConfigError(
            f"--init_checkpoint={init_checkpoint} has a {table[0]}-token embedding table but "
            f"--vocab_file={vocab_file} has {vocab_size} tokens; pass the vocab file (and "
            "bert_config.json) the checkpoint was pretrained with")


def load_task_data(config: FinetuningConfig, tokenizer, report: Reporter) -> TaskData:
    """Reads and encodes the splits the run needs; reports shortened rows and unseen labels."""
    tagging = config.task_name in tasks.TAGGING_TASKS
    columns = tasks.TsvColumns(config.text_a_column, config.text_b_column, config.label_column,
                               config.tsv_has_header)

    def read(split):
        if tagging:
            return tasks.read_sentences(config.task_name, config.data_dir, split,
                                        config.ner_lenient_tags)
        return tasks.read_examples(config.task_name, config.data_dir, split, columns)

    needed = [s for s, wanted in zip(tasks.SPLITS, (True, config.do_eval, config.do_predict),
                                     strict=True) if wanted]
    inputs = {split: read(split) for split in needed}
    train_labels = ([tag for s in inputs["train"] for tag in tasks.sentence_tags(s)] if tagging
                    else [e.label for e in inputs["train"]])
    label_names = tasks.label_list(config.task_name, train_labels,
                                   tasks.task_file(config.task_name, config.data_dir, "train"))
    encoded = {split: _encode(config, tokenizer, inputs[split], label_names, split, report)
               for split in needed}
    return TaskData(label_names, encoded.get("train"), encoded.get("dev"), encoded.get("test"),
                    inputs.get("test", []))


def _encode(config, tokenizer, inputs, label_names, split, report) -> tasks.Encoded:
    where = f"--data_dir={config.data_dir} ({split})"
    if config.task_name == "ner":
        encoded = tasks.encode_ner(tokenizer, inputs, label_names, config.max_seq_length, where)
        unit, action = "sentence(s)", "split into several rows"
        entities = sum(len(ner.entities(s.tags)) for s in inputs)
        report.log(f"{split}: {sum(a.boundaries_inside for a in encoded.alignments)} of "
                   f"{entities} gold entities have a boundary inside a word piece (no tagging "
                   "of pieces can get them exactly right)")
    elif config.task_name in tasks.TAGGING_TASKS:
        encoded = tasks.encode_sentences(tokenizer, inputs, label_names, config.max_seq_length,
                                         where)
        unit, action = "sentence(s)", "split into several rows"
    else:
        strict = config.task_name in tasks.GLUE_TASKS
        encoded = tasks.encode_examples(tokenizer, inputs, label_names, config.max_seq_length,
                                        where, strict)
        unit, action = "example(s)", "truncated"
    report.log(f"{split}: {len(inputs)} {unit} -> {encoded.num_rows} rows")
    if encoded.shortened:
        report.log(f"warning: {split}: {encoded.shortened} {unit} longer than --max_seq_length="
                   f"{config.max_seq_length} word pieces were {action}")
    if encoded.unseen_labels and split != "test":
        report.log(f"warning: {split}: {sum(encoded.unseen_labels.values())} item(s) have "
                   f"labels training never saw ({dict(encoded.unseen_labels)}); they count as "
                   "errors")
    return encoded


def _initialise(state: FinetuningState, config: FinetuningConfig, report: Reporter) -> None:
    """Rank 0 loads --init_checkpoint (the encoder but --reinit_top_layers; the head stays
    new), then applies --rescale_embeddings."""
    if not report.enabled:
        return
    if not config.init_checkpoint:
        report.log("no --init_checkpoint: random initialisation (a baseline)")
        return
    bert_config = state.model.config
    fresh = modeling.top_layer_scopes(bert_config, config.reinit_top_layers)
    kept = {name: v for name, v in state.params.items() if not name.startswith(fresh)}
    loaded = checkpoints.init_from_checkpoint(config.init_checkpoint, kept)
    report.log(f"initialised from {config.init_checkpoint}: {len(loaded.loaded)} loaded, "
               f"{len(state.params) - len(loaded.loaded)} new "
               f"({', '.join([*fresh, *loaded.missing][:4])})")
    ratio = modeling.word_embedding_rms(state.params) / bert_config.initializer_range
    if config.rescale_embeddings:
        modeling.rescale_embeddings(state.params, bert_config.initializer_range)
        report.log(f"--rescale_embeddings: embedding tables / {ratio:.3g}")
    elif ratio > EMBEDDINGS_LARGE:
        report.log(f"warning: --init_checkpoint's word embeddings are {ratio:.0f}x "
                   f"initializer_range ({bert_config.initializer_range:g}) in RMS, so AdamW "
                   "moves them slowly; a budget-recipe checkpoint fine-tunes better with "
                   "--rescale_embeddings (docs/budget.md)")


USER_ERRORS = (*loop.USER_ERRORS, FinetuningConfigError, tasks.TaskDataError, ConlluError,
               ner.NerDataError)
