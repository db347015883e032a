"""How much syntax a checkpoint's attention and word vectors hold (Clark et al. 2019, section
5, plus a per-layer part-of-speech probe).

    python -m bert_tf probe_syntax --init_checkpoint=DIR_OR_PREFIX \\
        --bert_config_file=bert_config.json --vocab_file=vocab.txt \\
        --train_conllu=gold.conllu [--eval_conllu=held_out.conllu] --output_dir=probe_report

Trains the dependency probes (attention, attention + word vectors, and the baselines) on
the training sentences' gold heads, each with the learning rate, L2 weight and passes that
do best on a dev part of the training sentences (one rule for all: probes.tune_and_train),
and scores UAS on the evaluation sentences; trains a linear UPOS classifier on each layer's
word vectors; repeats both on the same architecture from random initialisation. Writes
probes.json, uas.csv, upos_by_layer.csv, head_weights.json and probes.png
(--nodependency_probes: the UPOS probe alone, without uas.csv and head_weights.json). See
docs/attention.md.
"""

import dataclasses
import os
import sys
import time

import numpy as np
import tensorflow as tf
from absl import flags
from tqdm import tqdm

import bert_tf
from bert_tf.analysis import plots, probes, statistics
from bert_tf.analysis.analyze_attention import (
    AnalysisError,
    batches_of,
    conllu_segments,
    define_checkpoint_flags,
    load_model,
    segment_features,
)
from bert_tf.analysis.report_files import json_safe, write_csv, write_json
from bert_tf.data import shared_flags
from bert_tf.data.conllu import ConlluError, read_conllu
from bert_tf.data.files import OutputDirError
from bert_tf.data.numeric_flags import check_number
from bert_tf.data.output_dir import check_output_dir, replace_files_in
from bert_tf.data.tokenization import VocabError, check_vocab_size, load_tokenizer
from bert_tf.model import devices, modeling
from bert_tf.model.config import BertConfigError

# Everything a run writes in --output_dir (an earlier run's are replaced or removed).
REPORT_FILES = ("probes.json", "head_weights.json", "uas.csv", "upos_by_layer.csv",
                "probes.png")
LENGTH_BUCKET = 16  # forward passes pad to a multiple of this: few traces, little padding

# Clark et al. 2019, Table 3 (BERT-base, WSJ, Stanford Dependencies), as issue 26 quotes it.
PAPER_UAS = {"attn_and_vectors": 77, "attn": 62, "distance_and_vectors": 59,
             "right_branching": 26, "attn_random_init": 30}
PROBE_NAMES = {
    "attn_and_vectors": "Attn + word vectors",
    "attn": "Attn",
    "distance_and_vectors": "Distance + word vectors",
    "right_branching": "Right-branching",
    "attn_random_init": "Attn, random-init model",
    "attn_and_vectors_random_init": "Attn + word vectors, random-init model",
}


@dataclasses.dataclass
class ProbeArgs:
    init_checkpoint: str
    bert_config_file: str
    vocab_file: str
    output_dir: str
    train_conllu: str
    eval_conllu: str | None = None
    train_sentences: int = 1500
    max_eval_sentences: int = 0
    max_seq_length: int = 128
    batch_size: int = 32
    learning_rates: tuple = probes.LEARNING_RATES
    l2_weights: tuple = probes.L2_WEIGHTS
    max_epochs: int = probes.MAX_EPOCHS
    dev_fraction: float = probes.DEV_FRACTION
    upos_steps: int = 300
    dependency_probes: bool = True  # False: only the per-layer UPOS probe (seconds, not minutes)
    do_lower_case: bool | None = None  # None: the vocab's tokenizer spec
    allow_dictionary_mismatch: bool = False
    random_init: bool = True
    seed: int = 12345


# ---------------------------------------------------------------------------
# Input


def check_args(args):
    """AnalysisError naming the flag when an argument cannot work; OutputDirError when
    --output_dir cannot take the report (checked before any computation)."""
    for flag in ("batch_size", "max_epochs", "upos_steps"):
        check_number(flag, getattr(args, flag), at_least=1, integer=True, error=AnalysisError)
    if not args.learning_rates or not args.l2_weights:
        raise AnalysisError("--learning_rates and --l2_weights need at least one value each")
    for rate in args.learning_rates:
        check_number("learning_rates", rate, above=0, error=AnalysisError)
    for l2 in args.l2_weights:
        check_number("l2_weights", l2, at_least=0, error=AnalysisError)
    check_number("dev_fraction", args.dev_fraction, above=0, below=1, error=AnalysisError)
    # one sentence is held out as dev to tune the probes
    check_number("train_sentences", args.train_sentences, at_least=2, integer=True,
                 error=AnalysisError)
    check_number("max_eval_sentences", args.max_eval_sentences, at_least=0, integer=True,
                 error=AnalysisError)  # 0 = all
    check_number("max_seq_length", args.max_seq_length, at_least=4, integer=True,
                 error=AnalysisError)
    check_output_dir(args.output_dir, "output_dir")


def read_splits(args):
    """(train, eval) ParsedSentences: the first --train_sentences of --train_conllu, and
    --eval_conllu or else the rest of --train_conllu."""
    sentences = read_conllu(args.train_conllu, flag="train_conllu")
    train = sentences[:args.train_sentences]
    if args.eval_conllu:
        held_out = read_conllu(args.eval_conllu, flag="eval_conllu")
    else:
        held_out = sentences[args.train_sentences:]
        if not held_out:
            raise AnalysisError(
                f"--train_conllu={args.train_conllu} has {len(sentences)} sentences, none left "
                f"to evaluate after --train_sentences={args.train_sentences}; lower it or give "
                f"--eval_conllu")
    if args.max_eval_sentences:
        held_out = held_out[:args.max_eval_sentences]
    return train, held_out


def make_forward_fn(model, with_attention):
    ids = tf.TensorSpec([None, None], tf.int32)

    @tf.function(input_signature=[ids, ids, ids])  # one trace for every batch shape
    def forward(input_ids, input_mask, segment_ids):
        outputs = model.bert(input_ids, input_mask, segment_ids,
                             return_attention=with_attention)
        attention = tf.stack(outputs.attention_probs) if with_attention else tf.zeros([0])
        return attention, tf.stack(outputs.hidden_states)
    return forward


def word_level_outputs(model, segments, tokenizer, batch_size, with_attention):
    """Per segment: word-level attention [layers x heads, w + 2, w + 2] over [CLS] words
    [SEP] (None without `with_attention`: the UPOS probe needs none), and each layer's word
    vectors [layers + 1, w, D] (layer 0 = embeddings), a word's vector the mean of its
    pieces'."""
    forward = make_forward_fn(model, with_attention)
    order = sorted(range(len(segments)), key=lambda i: len(segments[i].tokens))
    outputs = [None] * len(segments)
    for batch in tqdm(list(batches_of(order, batch_size)), desc="model", unit="batch",
                      file=sys.stderr):
        longest = max(len(segments[i].tokens) for i in batch)
        length = -(-longest // LENGTH_BUCKET) * LENGTH_BUCKET
        features = segment_features([segments[i] for i in batch], tokenizer, length)
        attention, states = forward(**features)
        attention, states = attention.numpy(), states.numpy()
        for b, i in enumerate(batch):
            n, word_ids = len(segments[i].tokens), segments[i].word_ids
            maps = None
            if with_attention:
                maps = statistics.to_word_attention(attention[:, b, :, :n, :n], word_ids)
                maps = maps.reshape(-1, *maps.shape[-2:])
            outputs[i] = (maps, statistics.to_word_vectors(states[:, b, :n], word_ids)[:, 1:-1])
    return outputs


def input_embedding_vectors(model, segments, tokenizer):
    """Static word vectors: the model's input (word-piece) embeddings, averaged over each
    word's pieces and scaled to unit root-mean-square."""
    table = model.bert.embeddings.word_embeddings.numpy()
    table = table / np.sqrt(np.mean(table ** 2))
    return [statistics.to_word_vectors(table[tokenizer.convert_tokens_to_ids(s.tokens)],
                                       s.word_ids)[1:-1] for s in segments]


def random_init_model(config, seed):
    """The same architecture with fresh random weights, the same for the same seed."""
    tf.random.set_seed(seed)
    return modeling.BertForPreTraining(config)


# ---------------------------------------------------------------------------
# Probes


PROBE_INPUTS = {"attn": {"attention"}, "attn_and_vectors": {"attention", "vectors"},
                "distance_and_vectors": {"vectors", "distance"}}


def dependency_uas(train, held_out, args, with_baselines):
    """UAS of the attention probes (and, with_baselines, of distance + vectors and
    right-branching) on held_out after training on train (lists of ProbeSentence), each
    probe tuned by the same rule (probes.tune_and_train) on a dev part of train.

    Returns:
      ({name: UAS}, {name: trained probe}, {name: {"chosen": settings, "grid": dev UAS
      per setting and pass}}).
    """
    num_maps, dim = 2 * len(train[0].attention), train[0].vectors.shape[-1]
    make_probe = {"attn": lambda: probes.AttentionProbe(num_maps),
                  "attn_and_vectors": lambda: probes.AttentionProbe(num_maps, dim)}
    if with_baselines:
        make_probe["distance_and_vectors"] = lambda: probes.DistanceProbe(dim, args.seed)
    grid = probes.TuningGrid(tuple(args.learning_rates), tuple(args.l2_weights),
                             args.max_epochs, args.dev_fraction)
    _, dev = probes.split_dev(train, args.dev_fraction, args.seed)
    if not any(s.scored.any() for s in dev):
        raise AnalysisError(
            f"the dev part of the training sentences ({len(dev)} of {len(train)}, "
            f"--dev_fraction={args.dev_fraction}) has no scored word (only punctuation or "
            "words without a gold head) to tune the probes on; raise --train_sentences or "
            "--dev_fraction")
    uas, trained, tuning = {}, {}, {}
    for name, make in tqdm(make_probe.items(), desc="dependency probes", file=sys.stderr):
        trained[name], chosen, results = probes.tune_and_train(
            make, train, PROBE_INPUTS[name], grid, args.seed)
        tuning[name] = {"chosen": dataclasses.asdict(chosen), "grid": results}
        uas[name] = probes.probe_uas(
            trained[name], probes.make_batches(held_out, PROBE_INPUTS[name], args.batch_size))
    if with_baselines:
        uas["right_branching"] = probes.right_branching_uas(held_out)
    return uas, trained, tuning


def upos_by_layer(train, held_out, train_layers, eval_layers, steps):
    """Accuracy per layer of a linear UPOS classifier from word vectors (lists of
    [layers + 1, w, D] per sentence); None if the training words have no UPOS tags."""
    train_tags = np.concatenate([s.upos for s in train])
    tags = sorted(set(train_tags) - {"_"})
    if not tags:
        return None
    index = {tag: i for i, tag in enumerate(tags)}
    eval_tags = np.concatenate([s.upos for s in held_out])
    train_keep, eval_keep = train_tags != "_", eval_tags != "_"
    train_y = np.array([index[t] for t in train_tags[train_keep]], np.int32)
    eval_y = np.array([index.get(t, -1) for t in eval_tags[eval_keep]], np.int32)
    train_x = np.concatenate(train_layers, axis=1)[:, train_keep]
    eval_x = np.concatenate(eval_layers, axis=1)[:, eval_keep]
    return [probes.classifier_accuracy(train_x[layer], train_y, eval_x[layer], eval_y,
                                       len(tags), steps) for layer in range(len(train_x))]


def majority_upos(train, held_out):
    tags, counts = np.unique(np.concatenate([s.upos for s in train]), return_counts=True)
    eval_tags = np.concatenate([s.upos for s in held_out])
    eval_tags = eval_tags[eval_tags != "_"]
    return float(np.mean(eval_tags == tags[counts.argmax()])) if len(eval_tags) else None


def head_weights(probe, layers, heads):
    """The attention probe's weight per head and direction, [layers][heads] lists."""
    weights = probe.map_weights.numpy().reshape(2, layers, heads)
    cls_weight, sep_weight = probe.root_weights.numpy().tolist()
    return {"dependent_to_head": weights[0].tolist(), "head_to_dependent": weights[1].tolist(),
            "root_from_cls": cls_weight, "root_from_sep": sep_weight}


# ---------------------------------------------------------------------------
# Running everything


def _segments_of(sentences, tokenizer, args, flag):
    segments, skipped = conllu_segments(sentences, tokenizer.tokenize_batch,
                                        args.max_seq_length)
    if not segments:
        raise AnalysisError(f"--{flag}: every sentence is longer than "
                            f"--max_seq_length={args.max_seq_length} word pieces")
    return segments, skipped


def _probe_model(model, segments, vectors, tokenizer, args, with_baselines):
    """Dependency UAS, trained probes and their tuning (dependency_uas), and per-layer
    UPOS accuracy, from one model's attention and states."""
    layer_vectors, uas_sets = {}, {}
    for split in ("train", "eval"):
        outputs = word_level_outputs(model, segments[split], tokenizer, args.batch_size,
                                     with_attention=args.dependency_probes)
        if args.dependency_probes:
            uas_sets[split] = [probes.probe_sentence(s.sentence, maps, v) for s, (maps, _), v
                               in zip(segments[split], outputs, vectors[split], strict=True)]
        layer_vectors[split] = [states for _, states in outputs]
    uas, trained, tuning = (dependency_uas(uas_sets["train"], uas_sets["eval"], args,
                                           with_baselines)
                            if args.dependency_probes else ({}, {}, {}))
    upos = upos_by_layer([s.sentence for s in segments["train"]],
                         [s.sentence for s in segments["eval"]],
                         layer_vectors["train"], layer_vectors["eval"], args.upos_steps)
    return uas, upos, trained, tuning


def run_probes(args):
    """Runs every probe and writes the report; returns the report dict."""
    start = time.time()
    check_args(args)
    train, held_out = read_splits(args)
    tokenizer = load_tokenizer(args.vocab_file, args.do_lower_case,
                               args.allow_dictionary_mismatch)
    model, _ = load_model(args)
    check_vocab_size(tokenizer, model.config.vocab_size,
                     f"--bert_config_file={args.bert_config_file}")
    eval_flag = "eval_conllu" if args.eval_conllu else "train_conllu"
    segments, skipped = {}, {}
    for split, sentences, flag in (("train", train, "train_conllu"),
                                   ("eval", held_out, eval_flag)):
        segments[split], skipped[split] = _segments_of(sentences, tokenizer, args, flag)
    vectors = {split: input_embedding_vectors(model, segments[split], tokenizer)
               for split in segments}
    config = model.config
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    uas, upos, trained, tuning = _probe_model(model, segments, vectors, tokenizer, args, True)
    weights = {"attn": head_weights(trained["attn"], layers, heads),
               "attn_and_vectors_bias": head_weights(trained["attn_and_vectors"], layers,
                                                     heads)} if trained else {}
    upos_random = None
    if args.random_init:
        random_uas, upos_random, random_trained, random_tuning = _probe_model(
            random_init_model(config, args.seed), segments, vectors, tokenizer, args, False)
        uas.update({f"{name}_random_init": value for name, value in random_uas.items()})
        tuning.update({f"{name}_random_init": value for name, value in random_tuning.items()})
        if random_trained:
            weights["attn_random_init"] = head_weights(random_trained["attn"], layers, heads)
    report = {
        "checkpoint": args.init_checkpoint,
        "model": {"num_layers": layers, "num_heads": heads, "hidden_size": config.hidden_size},
        "data": {split: {"sentences": len(segments[split]), "skipped_too_long": skipped[split],
                         "scored_words": int(sum(np.sum(probes.probe_sentence(s.sentence).scored)
                                                 for s in segments[split]))}
                 for split in segments},
        "uas": {name: uas[name] for name in PROBE_NAMES if name in uas},
        "tuning": tuning,
        "paper_uas": PAPER_UAS,
        "upos_accuracy": {"trained": upos, "random_init": upos_random,
                          "majority_tag": majority_upos(train, held_out)},
        "settings": {f.name: getattr(args, f.name) for f in dataclasses.fields(args)},
        "word_vectors": "the model's input word-piece embeddings, mean over a word's pieces",
    }
    report["seconds"] = round(time.time() - start, 1)
    _write_report(report, weights, args.output_dir)
    return report


# ---------------------------------------------------------------------------
# Output


def _write_files(report, weights, directory):
    """probes.png from the report as computed (a nan UAS has no bar); the JSON and CSV
    files with nan as null or an empty cell."""
    plots.plot_probes(report, PROBE_NAMES, os.path.join(directory, "probes.png"))
    report = json_safe(report)
    write_json(os.path.join(directory, "probes.json"), report)
    if report["uas"]:  # not with --nodependency_probes
        write_json(os.path.join(directory, "head_weights.json"), weights)
        write_csv(os.path.join(directory, "uas.csv"), ["probe", "uas", "paper_bert_base_wsj"],
                   [[name, value, PAPER_UAS.get(name, "")]
                    for name, value in report["uas"].items()])
    upos = report["upos_accuracy"]
    if upos["trained"] is not None:
        random_init = upos["random_init"] or [""] * len(upos["trained"])
        write_csv(os.path.join(directory, "upos_by_layer.csv"),
                   ["layer", "trained", "random_init"],
                   [[layer, *values] for layer, values in
                    enumerate(zip(upos["trained"], random_init, strict=True))])


def _write_report(report, weights, output_dir):
    """Writes every file in a staging directory inside output_dir, then moves them in and
    removes an earlier run's files this one lacks, so a failure leaves no partial report
    and a rerun no stale one."""
    with replace_files_in(output_dir, REPORT_FILES) as staging:
        _write_files(report, weights, staging)


# ---------------------------------------------------------------------------
# Command line


def define_flags():
    """The command line's flags; defaults come from ProbeArgs."""
    d = bert_tf.flag_defaults(ProbeArgs)
    define_checkpoint_flags()
    flags.DEFINE_string("output_dir", None, "Where probes.json, uas.csv, upos_by_layer.csv, "
                        "head_weights.json and probes.png go.")
    flags.DEFINE_string("train_conllu", None, "CoNLL-U gold parses (HEAD and UPOS) to train "
                        "the probes on: its first --train_sentences sentences.")
    flags.DEFINE_string("eval_conllu", None, "CoNLL-U gold parses to score on; default: the "
                        "sentences of --train_conllu after the first --train_sentences.")
    flags.DEFINE_integer("train_sentences", d["train_sentences"],
                         "Training sentences, from the start of --train_conllu.")
    flags.DEFINE_integer("max_eval_sentences", d["max_eval_sentences"],
                         "At most this many evaluation sentences (0 = all).")
    flags.DEFINE_integer("max_seq_length", d["max_seq_length"],
                         "Sentences longer than this in word pieces (with [CLS], [SEP]) are "
                         "skipped and counted.")
    flags.DEFINE_integer("batch_size", d["batch_size"], "Sentences per forward pass and "
                         "per probe evaluation batch.")
    flags.DEFINE_multi_float("learning_rates", list(d["learning_rates"]), "Adam rates each "
                             "dependency probe is tuned over (repeat the flag for more).")
    flags.DEFINE_multi_float("l2_weights", list(d["l2_weights"]), "L2 weights each dependency "
                             "probe is tuned over (repeat the flag for more).")
    flags.DEFINE_integer("max_epochs", d["max_epochs"], "At most this many passes over the "
                         "training sentences per tuning run (early stopping on dev UAS).")
    flags.DEFINE_float("dev_fraction", d["dev_fraction"], "Share of the training sentences "
                       "held out as dev to pick each probe's rate, L2 and passes.")
    flags.DEFINE_integer("upos_steps", d["upos_steps"], "Full-batch Adam steps of each "
                         "layer's UPOS classifier.")
    flags.DEFINE_bool("dependency_probes", d["dependency_probes"], "Train the dependency "
                      "(UAS) probes; --nodependency_probes runs only the per-layer UPOS "
                      "probe, in seconds where the dependency probes take minutes.")
    shared_flags.define_tokenizer_flags(d)
    flags.DEFINE_bool("random_init", d["random_init"], "Also probe the same architecture "
                      "with random weights (the control).")
    flags.DEFINE_integer("seed", d["seed"], "Seed of the random-init model and of the probes.")
    for name in ("output_dir", "train_conllu"):
        flags.mark_flag_as_required(name)


def _settings_note(tuning):
    """What tuning chose for one probe, in words; empty for one that is not trained."""
    if not tuning:
        return ""
    chosen = tuning["chosen"]
    return (f"  (rate {chosen['learning_rate']:g}, L2 {chosen['l2']:g}, "
            f"{chosen['epochs']} passes)")


def run(args: ProbeArgs) -> int:
    """Probes the model and prints the UAS table and UPOS accuracy per layer; returns the
    exit status."""
    devices.use_one_gpu()
    report = run_probes(args)
    sentences = report["data"]["eval"]["sentences"]
    if report["uas"]:
        table = "\n".join(f"  {PROBE_NAMES[name]:<40} {100 * value:5.1f}"
                          f"{_settings_note(report['tuning'].get(name))}"
                          for name, value in report["uas"].items())
        print(f"UAS on {sentences} held-out sentences:\n{table}")
    upos = report["upos_accuracy"]
    for key, label in (("trained", "this checkpoint"), ("random_init", "random init")):
        if upos[key]:
            layers = ", ".join(f"{100 * value:.1f}" for value in upos[key])
            print(f"UPOS accuracy per layer (0 = embeddings), {label}: {layers}")
    print(f"report in {args.output_dir}")
    return 0


if __name__ == "__main__":
    bert_tf.run_command(define_flags, ProbeArgs, run, errors=(
        AnalysisError, ConlluError, BertConfigError, VocabError, OutputDirError))
