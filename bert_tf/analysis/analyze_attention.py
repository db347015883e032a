"""Analyses what a BERT checkpoint's attention heads look at (Clark et al. 2019).

    python -m bert_tf analyze_attention --init_checkpoint=DIR_OR_PREFIX \\
        --bert_config_file=bert_config.json --vocab_file=vocab.txt \\
        --input_file=corpus.txt --output_dir=attention_report

The input is pretraining-format text (one sentence per line, blank line between
documents), packed into `[CLS] A [SEP] B [SEP]` segments. Writes stats.json,
tables/*.csv (layer x head per statistic), plots/*.png and attention_example.html
(an offline view of the first segment's attention). See docs/attention.md.
"""

import dataclasses
import math
import os
import sys

import numpy as np
import tensorflow as tf
from absl import flags
from tqdm import tqdm

import bert_tf
from bert_tf.analysis import report_files, statistics
from bert_tf.data import shared_flags
from bert_tf.data.conllu import ConlluError, ParsedSentence, read_conllu
from bert_tf.data.files import InputDataError, OutputDirError, read_text
from bert_tf.data.numeric_flags import check_number
from bert_tf.data.output_dir import check_output_dir
from bert_tf.data.tokenization import VocabError, check_vocab_size, load_tokenizer
from bert_tf.model import checkpoints, devices, modeling
from bert_tf.model.config import BertConfig, BertConfigError

MASKED_LM_FRACTION = 0.15  # of each segment's word pieces, masked for the gradient


class AnalysisError(Exception):
    """Bad input for the analysis (the message names the flag or file)."""


@dataclasses.dataclass
class AnalysisArgs:
    init_checkpoint: str
    bert_config_file: str
    vocab_file: str
    output_dir: str
    input_file: str | None = None
    conllu: str | None = None
    max_segments: int = 1000
    max_seq_length: int = 128
    batch_size: int = 16
    word_level: bool = False
    do_lower_case: bool | None = None  # None: the vocab's tokenizer spec
    allow_dictionary_mismatch: bool = False
    js_rows_per_segment: int = 16
    mlm_gradient: bool = True
    seed: int = 12345


@dataclasses.dataclass
class Segment:
    tokens: list[str]
    segment_ids: list[int]
    word_ids: list[int] | None = None  # for word-level maps
    sentence: ParsedSentence | None = None  # CoNLL-U gold parse


# ---------------------------------------------------------------------------
# Input text -> segments


def read_documents(path):
    """Yields documents (lists of non-empty lines) of a pretraining-format file (compressed
    ones read transparently)."""
    try:
        text, _ = read_text(path)
    except InputDataError as e:
        raise AnalysisError(f"--input_file: {e}") from None
    for block in text.split("\n\n"):
        document = [line.strip() for line in block.split("\n") if line.strip()]
        if document:
            yield document


def _take_sentences(sentences, start, limit):
    """Whole sentences from `start` while they fit in `limit` pieces (at least
    one, truncated if it alone is too long) -> (pieces, next index)."""
    pieces, i = [], start
    while i < len(sentences) and len(pieces) + len(sentences[i]) <= limit:
        pieces += sentences[i]
        i += 1
    if not pieces and i < len(sentences):
        pieces, i = sentences[i][:limit], i + 1
    return pieces, i


def build_segments(documents, tokenize_batch, max_seq_length, max_segments):
    """Packs consecutive sentences of each document into [CLS] A [SEP] B [SEP]
    segments of at most max_seq_length pieces, A taking about half (as Clark
    et al. did with Wikipedia paragraphs); a document's leftover sentence
    becomes [CLS] A [SEP]."""
    budget = max_seq_length - 3
    segments = []
    for document in documents:
        sentences = [pieces for pieces in tokenize_batch(document) if pieces]
        i = 0
        while i < len(sentences) and len(segments) < max_segments:
            first, i = _take_sentences(sentences, i, budget // 2)
            second, i = _take_sentences(sentences, i, budget - len(first))
            tokens = [statistics.CLS, *first, statistics.SEP]
            segment_ids = [0] * len(tokens)
            if second:
                tokens += [*second, statistics.SEP]
                segment_ids += [1] * (len(second) + 1)
            segments.append(Segment(tokens, segment_ids))
        if len(segments) >= max_segments:
            break
    return segments


def conllu_segments(sentences, tokenize_batch, max_seq_length):
    """[CLS] sentence [SEP] per parsed sentence, with each piece's word index
    (0 = [CLS]); sentences longer than max_seq_length are skipped."""
    segments, skipped = [], 0
    for sentence in sentences:
        tokens, word_ids = [statistics.CLS], [0]
        for index, (word, pieces) in enumerate(
                zip(sentence.words, tokenize_batch(sentence.words), strict=True), 1):
            pieces = pieces or [word]
            tokens += pieces
            word_ids += [index] * len(pieces)
        if len(tokens) + 1 > max_seq_length:
            skipped += 1
            continue
        tokens.append(statistics.SEP)
        word_ids.append(len(sentence.words) + 1)
        segments.append(Segment(tokens, [0] * len(tokens), word_ids, sentence))
    return segments, skipped


# ---------------------------------------------------------------------------
# The model


def _masked_lm_head_problem(report, variables):
    """Why the checkpoint's masked-LM head can't give a meaningful loss, or None.
    Converting encoder-only weights (e.g. sentence-transformers) leaves the head
    at its initial values: LayerNorm gamma 1, beta 0, output bias 0."""
    if any(name.startswith("cls/predictions") for name in report.missing):
        return "the checkpoint has no masked-LM head (cls/predictions/...)"
    initial = {"cls/predictions/transform/LayerNorm/gamma": 1.0,
               "cls/predictions/transform/LayerNorm/beta": 0.0,
               "cls/predictions/output_bias": 0.0}
    if all(np.all(variables[name].numpy() == value) for name, value in initial.items()):
        return ("the checkpoint's masked-LM head is untrained (still at its initial values, "
                "as bert_tf.model.convert leaves it for encoder-only weights)")
    return None


def load_model(args):
    """-> (BertForPreTraining, why the MLM gradient can't be computed or None)."""
    for flag in ("bert_config_file", "vocab_file"):
        if not os.path.isfile(getattr(args, flag)):
            raise AnalysisError(f"--{flag}: no such file {getattr(args, flag)}")
    config = BertConfig.from_json_file(args.bert_config_file)
    if args.max_seq_length > config.max_position_embeddings:
        raise AnalysisError(f"--max_seq_length={args.max_seq_length} exceeds the model's "
                            f"max_position_embeddings ({config.max_position_embeddings})")
    model = modeling.BertForPreTraining(config)
    variables = modeling.variables_by_name(model)
    try:
        report = checkpoints.restore(args.init_checkpoint, variables)
    except checkpoints.CheckpointError as e:
        raise AnalysisError(f"--init_checkpoint={args.init_checkpoint}: {e}") from None
    missing_encoder = [name for name in report.missing
                       if name.startswith("bert/") and not name.startswith("bert/pooler")]
    if missing_encoder:
        raise AnalysisError(
            f"--init_checkpoint={args.init_checkpoint} lacks {len(missing_encoder)} encoder "
            f"variable(s), e.g. {missing_encoder[0]}; is it a BERT checkpoint matching "
            f"--bert_config_file?")
    return model, _masked_lm_head_problem(report, variables)


def _pad(rows, length, value=0):
    return np.array([row + [value] * (length - len(row)) for row in rows], dtype=np.int32)


def segment_features(segments, tokenizer, max_seq_length):
    return {
        "input_ids": _pad([tokenizer.convert_tokens_to_ids(s.tokens) for s in segments],
                          max_seq_length, tokenizer.pad_id),
        "input_mask": _pad([[1] * len(s.tokens) for s in segments], max_seq_length),
        "segment_ids": _pad([s.segment_ids for s in segments], max_seq_length),
    }


def _mask_for_gradient(features, segments, tokenizer, max_predictions, rng):
    """Masks MASKED_LM_FRACTION of each segment's non-special pieces with
    [MASK] and adds the masked-LM label features."""
    features = dict(features, input_ids=features["input_ids"].copy())
    batch = len(segments)
    positions = np.zeros((batch, max_predictions), np.int32)
    ids = np.zeros((batch, max_predictions), np.int32)
    weights = np.zeros((batch, max_predictions), np.float32)
    for b, segment in enumerate(segments):
        candidates = [i for i, t in enumerate(segment.tokens) if t not in statistics.SPECIAL_TOKENS]
        count = min(max_predictions, len(candidates),
                    max(1, round(MASKED_LM_FRACTION * len(candidates))))
        chosen = np.sort(rng.choice(candidates, count, replace=False)) if count else []
        positions[b, :count] = chosen
        ids[b, :count] = features["input_ids"][b, chosen]
        weights[b, :count] = 1.0
        features["input_ids"][b, chosen] = tokenizer.mask_id
    features.update(masked_lm_positions=positions, masked_lm_ids=ids, masked_lm_weights=weights,
                    next_sentence_labels=np.zeros(batch, np.int32))
    return features


def make_attention_fn(model):
    @tf.function(autograph=False)
    def attention(input_ids, input_mask, segment_ids):
        outputs = model.bert(input_ids, input_mask, segment_ids, return_attention=True)
        return tf.stack(outputs.attention_probs)  # [layers, B, heads, S, S]
    return attention


def make_gradient_fn(model):
    """d (summed masked-LM loss) / d attention probabilities, per layer. The
    model's returned attention_probs are the tensors its context matmul uses,
    so the tape differentiates through them directly."""
    @tf.function(autograph=False)
    def gradient(features):
        with tf.GradientTape() as tape:
            outputs = model(features, return_attention=True)
            loss = modeling.pretraining_loss(outputs, features)["mlm_loss_sum"]
        grads = tape.gradient(loss, outputs.bert.attention_probs)
        if any(g is None for g in grads):
            raise AnalysisError("the model's attention_probs are not on the path to its loss; "
                                "cannot take the gradient with respect to attention")
        return tf.stack(grads)
    return gradient


# ---------------------------------------------------------------------------
# Running the analysis


def batches_of(items, size):
    for start in range(0, len(items), size):
        yield items[start:start + size]


def check_args(args):
    """AnalysisError naming the flag when an argument cannot work; OutputDirError when
    --output_dir cannot take the report (checked before any computation)."""
    if not args.input_file and not args.conllu:
        raise AnalysisError("give --input_file (pretraining-format text) and/or --conllu")
    if args.input_file and not os.path.isfile(args.input_file):
        raise AnalysisError(f"--input_file: no such file {args.input_file}")
    for flag in ("max_segments", "batch_size"):
        check_number(flag, getattr(args, flag), at_least=1, integer=True, error=AnalysisError)
    check_number("js_rows_per_segment", args.js_rows_per_segment, at_least=0, integer=True,
                 error=AnalysisError)  # 0 = all
    check_number("max_seq_length", args.max_seq_length, at_least=4, integer=True,
                 error=AnalysisError)
    check_output_dir(args.output_dir, "output_dir")


def analyse(args):
    """Runs everything and writes the report; returns the stats dict."""
    check_args(args)
    sentences = read_conllu(args.conllu) if args.conllu else None
    tokenizer = load_tokenizer(args.vocab_file, args.do_lower_case,
                               args.allow_dictionary_mismatch)
    model, mlm_head_problem = load_model(args)
    check_vocab_size(tokenizer, model.config.vocab_size,
                     f"--bert_config_file={args.bert_config_file}")
    config = model.config
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    attention_fn = make_attention_fn(model)

    def attention_maps(batch):
        """Token-level maps of each segment in the batch, [layers, heads, n, n]."""
        features = segment_features(batch, tokenizer, args.max_seq_length)
        maps = attention_fn(**features).numpy()
        return [maps[:, b, :, :len(s.tokens), :len(s.tokens)] for b, s in enumerate(batch)]

    report = {
        "checkpoint": args.init_checkpoint,
        "model": {"num_layers": layers, "num_heads": heads, "hidden_size": config.hidden_size},
        "word_level": args.word_level,
        "max_seq_length": args.max_seq_length,
    }
    example = None
    if args.input_file:
        segments = build_segments(read_documents(args.input_file), tokenizer.tokenize_batch,
                                  args.max_seq_length, args.max_segments)
        if not segments:
            raise AnalysisError(f"--input_file={args.input_file}: no text found; expected one "
                                "sentence per line, blank lines between documents")
        head_report, example = _text_report(segments, args, layers, heads, attention_maps)
        report.update(head_report)
        report.update(_mlm_gradient_report(model, segments, tokenizer, args, mlm_head_problem))
    if sentences is not None:
        report["dependency"] = _dependency_report(sentences, tokenizer, args, layers, heads,
                                                  attention_maps)
    report_files.write_attention_report(report, example, args.output_dir)
    return report


def _text_report(segments, args, layers, heads, attention_maps):
    """Per-head statistics and distances over the text's segments, and the first segment's
    (tokens, maps) as the example the HTML page shows."""
    head_stats = statistics.HeadStatistics(layers, heads)
    distances = statistics.HeadDistances(layers * heads, args.js_rows_per_segment, args.seed)
    example = None
    for batch in tqdm(list(batches_of(segments, args.batch_size)), desc="attention",
                      unit="batch", file=sys.stderr):
        for segment, maps in zip(batch, attention_maps(batch), strict=True):
            tokens = segment.tokens
            if args.word_level:
                word_ids = statistics.word_ids_from_pieces(tokens)
                maps = statistics.to_word_attention(maps, word_ids)
                tokens = statistics.words_from_pieces(tokens, word_ids)
            head_stats.add(maps, tokens)
            distances.add(maps)
            if example is None:
                example = (tokens, maps)
    return _head_report(head_stats, distances), example


def _mlm_gradient_report(model, segments, tokenizer, args, mlm_head_problem):
    if not args.mlm_gradient:
        return {"mlm_gradient": None, "mlm_gradient_note": "disabled (--nomlm_gradient)"}
    if mlm_head_problem:
        return {"mlm_gradient": None, "mlm_gradient_note": f"not computed: {mlm_head_problem}"}
    config = model.config
    gradients = _mlm_gradients(model, segments, tokenizer, args, config.num_hidden_layers,
                               config.num_attention_heads)
    return {"mlm_gradient": {k: v.tolist() for k, v in gradients.means().items()},
            "mlm_gradient_note": ("mean |d masked-LM loss / d attention weight| by attended "
                                  "token, token level")}


def _head_report(head_stats, distances):
    means = head_stats.means()
    divergences = distances.divergences()
    uniform = head_stats.uniform_entropy
    return {
        "num_segments": head_stats.num_segments,
        "num_tokens": head_stats.num_tokens,
        "uniform_entropy": uniform,
        "statistics": {name: value.tolist() for name, value in means.items()},
        "behaviours": statistics.head_behaviours(means, uniform).tolist(),
        "js_divergence": divergences.tolist(),
        "js_rows": distances.num_rows,
        "mds": statistics.classical_mds(divergences).tolist(),
    }


def _mlm_gradients(model, segments, tokenizer, args, layers, heads):
    gradient_fn = make_gradient_fn(model)
    max_predictions = max(1, math.ceil(MASKED_LM_FRACTION * args.max_seq_length))
    rng = np.random.default_rng(args.seed)
    gradients = statistics.AttentionGradients(layers, heads)
    for batch in tqdm(list(batches_of(segments, args.batch_size)), desc="MLM gradient",
                      unit="batch", file=sys.stderr):
        features = segment_features(batch, tokenizer, args.max_seq_length)
        features = _mask_for_gradient(features, batch, tokenizer, max_predictions, rng)
        grads = gradient_fn(features).numpy()
        for b, segment in enumerate(batch):
            n = len(segment.tokens)
            gradients.add(grads[:, b, :, :n, :n], segment.tokens)
    return gradients


def _dependency_report(sentences, tokenizer, args, layers, heads, attention_maps):
    segments, skipped = conllu_segments(sentences, tokenizer.tokenize_batch,
                                        args.max_seq_length)
    if not segments:
        raise AnalysisError(f"--conllu={args.conllu}: every sentence is longer than "
                            f"--max_seq_length={args.max_seq_length} word pieces")
    accuracy = statistics.DependencyAccuracy(layers, heads)
    for batch in tqdm(list(batches_of(segments, args.batch_size)), desc="dependencies",
                      unit="batch", file=sys.stderr):
        for segment, maps in zip(batch, attention_maps(batch), strict=True):
            accuracy.add(statistics.to_word_attention(maps, segment.word_ids), segment.sentence)
    return {"num_sentences": len(segments), "skipped_too_long": skipped,
            "relations": accuracy.table()}


# ---------------------------------------------------------------------------
# Command line


def define_checkpoint_flags():
    """The model to analyse, required (also probe_syntax's)."""
    flags.DEFINE_string("init_checkpoint", None, "Checkpoint directory or prefix to analyse.")
    flags.DEFINE_string("bert_config_file", None, "The model's bert_config.json.")
    flags.DEFINE_string("vocab_file", None, "WordPiece vocabulary of the model.")
    for name in ("init_checkpoint", "bert_config_file", "vocab_file"):
        flags.mark_flag_as_required(name)


def define_flags():
    """The command line's flags; defaults come from AnalysisArgs."""
    d = {f.name: f.default for f in dataclasses.fields(AnalysisArgs)}
    define_checkpoint_flags()
    flags.DEFINE_string("input_file", None, "Text: one sentence per line, blank line "
                        "between documents.")
    flags.DEFINE_string("output_dir", None, "Where stats.json, tables/, plots/ and "
                        "attention_example.html go.")
    flags.DEFINE_string("conllu", None, "Optional CoNLL-U gold dependency parses: per relation, "
                        "the best head's accuracy at finding the syntactic head.")
    flags.DEFINE_integer("max_segments", d["max_segments"],
                         "Number of [CLS] A [SEP] B [SEP] segments.")
    flags.DEFINE_integer("max_seq_length", d["max_seq_length"],
                         "Maximum word pieces per segment.")
    flags.DEFINE_integer("batch_size", d["batch_size"], "Segments per forward pass.")
    flags.DEFINE_bool("word_level", d["word_level"], "Analyse word-level maps: attention to a "
                      "split word summed over its pieces, from it averaged.")
    shared_flags.define_tokenizer_flags(d)
    flags.DEFINE_integer("js_rows_per_segment", d["js_rows_per_segment"],
                         "Attending tokens per segment sampled for the Jensen-Shannon head "
                         "distances (cost grows with heads^2); 0 = all.")
    flags.DEFINE_bool("mlm_gradient", d["mlm_gradient"], "Compute the masked-LM loss gradient "
                      "with respect to attention (needs a trained cls/predictions head).")
    flags.DEFINE_integer("seed", d["seed"], "Seed for masking and row sampling.")
    flags.mark_flag_as_required("output_dir")


def run(args: AnalysisArgs) -> int:
    """Runs the analysis and says where the report went; returns the exit status."""
    devices.use_one_gpu()
    report = analyse(args)
    print(f"analysed {report.get('num_segments', 0)} segments; report in {args.output_dir}")
    return 0


if __name__ == "__main__":
    bert_tf.run_command(define_flags, AnalysisArgs, run, errors=(
        AnalysisError, ConlluError, BertConfigError, VocabError, OutputDirError))
