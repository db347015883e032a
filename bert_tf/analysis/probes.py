"""Probes of how much syntax a BERT holds: Clark et al. 2019 ("What Does BERT Look At?",
arXiv:1906.04341), section 5, and a per-layer part-of-speech probe of its word vectors.

Inputs are word-level numpy arrays per sentence (ProbeSentence), so this module knows
nothing of checkpoints or files. A dependent word j chooses its head among candidates
0 (the root) and 1..w (the words, 1-based as in CoNLL-U; never j itself). Every probe is
trained with Adam on the gold heads by one rule, tune_and_train (rate, L2 and passes picked
on a dev part of the training sentences), and scored as UAS: the share of scored words
(gold head given, UPOS not PUNCT) whose argmax candidate is the gold head.
"""

import dataclasses

import numpy as np
import tensorflow as tf

PUNCT = "PUNCT"
# The grid every dependency probe is tuned over (tune_and_train); 0.002 is Clark et al.'s
# Adam rate (Syntax_Analysis.ipynb), which they used untuned on 20x our training sentences.
LEARNING_RATES = (0.001, 0.003, 0.01, 0.03)
L2_WEIGHTS = (0.0, 1e-3)
MAX_EPOCHS = 20
PATIENCE = 3  # passes without a better dev UAS before a setting's run stops
DEV_FRACTION = 0.15  # of the training sentences, held out to pick the settings
EVAL_BATCH_SIZE = 32
TRAIN_BATCH_SIZE = 8  # sentences per Adam step (Clark et al.: 1; the rate is tuned instead)
MLP_HIDDEN = 256  # their distance + GloVe baseline: one tanh layer of 256
DISTANCE_OFFSETS = (-3, -2, -1, 1, 2, 3)
NUM_DISTANCE_FEATURES = len(DISTANCE_OFFSETS) + 3  # + forward, backward distance, root
NOT_A_CANDIDATE = -1e9


@dataclasses.dataclass
class ProbeSentence:
    """One sentence's probe inputs.

    heads: [w] gold heads (0 = root, i = word i, -1 = not given).
    scored: [w] bool, whether the word counts in UAS.
    attention: [K, w + 2, w + 2] word-level maps of all layers x heads over
      [CLS] words [SEP] (row = attending word), or None.
    vectors: [w, D] static word vectors, or None.
    """
    heads: np.ndarray
    scored: np.ndarray
    attention: np.ndarray | None = None
    vectors: np.ndarray | None = None


def probe_sentence(parsed, attention=None, vectors=None):
    """A ProbeSentence from a bert_tf.data.conllu.ParsedSentence."""
    heads = np.asarray(parsed.heads, dtype=np.int32)
    upos = np.asarray(parsed.upos or ["_"] * len(heads), dtype=object)
    return ProbeSentence(heads, (heads >= 0) & (upos != PUNCT), attention, vectors)


# ---------------------------------------------------------------------------
# Batches: per sentence features, zero padded to the longest sentence


def _attention_features(attention, width):
    """[K, w+2, w+2] -> word maps [2K, width, width] and root maps [2, 2K, width].

    Map m < K is a_k(j, i), dependent j attending to candidate i; map K + k the transpose
    a_k(i, j). The root has no token: as in Clark et al.'s probe, it is scored from the
    attention between the word and [CLS] (root map 0) and [SEP] (root map 1)."""
    w = attention.shape[-1] - 2
    both = np.concatenate([attention, np.swapaxes(attention, -1, -2)])
    words = np.zeros((len(both), width, width), np.float32)
    words[:, :w, :w] = both[:, 1:-1, 1:-1]
    root = np.zeros((2, len(both), width), np.float32)
    root[0, :, :w] = both[:, 1:-1, 0]
    root[1, :, :w] = both[:, 1:-1, -1]
    return words, root


def distance_features(num_words, width):
    """[width, width + 1, NUM_DISTANCE_FEATURES] per (dependent, candidate): one-hot
    offsets (candidate - dependent) in DISTANCE_OFFSETS, the forward and the backward
    distance over the sentence length, and whether the candidate is the root."""
    features = np.zeros((width, width + 1, NUM_DISTANCE_FEATURES), np.float32)
    offset = np.arange(num_words)[None, :] - np.arange(num_words)[:, None]
    pairs = features[:num_words, 1:num_words + 1]
    for f, k in enumerate(DISTANCE_OFFSETS):
        pairs[..., f] = offset == k
    pairs[..., -3] = np.maximum(offset, 0) / num_words
    pairs[..., -2] = np.maximum(-offset, 0) / num_words
    features[:num_words, 0, -1] = 1.0
    return features


def make_batch(sentences, inputs):
    """Pads sentences into one batch of numpy arrays.

    Args:
      sentences: ProbeSentences.
      inputs: which features to build, a subset of {"attention", "vectors", "distance"}.

    Returns:
      A dict: heads [B, W] (-1 = padding or no gold head), scored [B, W] (counts in
      UAS), candidates [B, W, W + 1] bool,
      and word_attention [B, 2K, W, W], root_attention [B, 2, 2K, W], vectors [B, W, D],
      distance [B, W, W + 1, F] as asked.
    """
    width = max(len(s.heads) for s in sentences)
    heads = np.full((len(sentences), width), -1, np.int32)
    scored = np.zeros((len(sentences), width), bool)
    candidates = np.zeros((len(sentences), width, width + 1), bool)
    for b, sentence in enumerate(sentences):
        w = len(sentence.heads)
        heads[b, :w] = sentence.heads
        scored[b, :w] = sentence.scored
        candidates[b, :w, :w + 1] = True
        candidates[b, np.arange(w), np.arange(w) + 1] = False  # not its own head
    batch = {"heads": heads, "scored": scored, "candidates": candidates}
    if "attention" in inputs:
        word_maps, root_maps = zip(*(_attention_features(s.attention, width)
                                     for s in sentences), strict=True)
        batch.update(word_attention=np.stack(word_maps), root_attention=np.stack(root_maps))
    if "vectors" in inputs:
        vectors = np.zeros((len(sentences), width, sentences[0].vectors.shape[-1]), np.float32)
        for b, sentence in enumerate(sentences):
            vectors[b, :len(sentence.heads)] = sentence.vectors
        batch["vectors"] = vectors
    if "distance" in inputs:
        batch["distance"] = np.stack([distance_features(len(s.heads), width)
                                      for s in sentences])
    return batch


def make_batches(sentences, inputs, batch_size):
    """Batches of sentences of similar length (less padding), in a fixed order."""
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i].heads))
    return [make_batch([sentences[i] for i in order[start:start + batch_size]], inputs)
            for start in range(0, len(order), batch_size)]


# ---------------------------------------------------------------------------
# The probes: logits [B, W, W + 1] over (root, words) for each dependent


class AttentionProbe(tf.Module):
    """Clark et al.'s "Attn": the score of candidate i for dependent j is
    sum_m c_m A_m(j, i) over the 2K maps (every head, both directions). With
    vector_dim > 0 it is their "Attn + GloVe": each weight becomes c_m + (W_dep v_j)_m
    + (W_head v_i)_m, a linear function of the two words' vectors (the root's is 0)."""

    def __init__(self, num_maps, vector_dim=0):
        super().__init__()
        self.map_weights = tf.Variable(tf.zeros([num_maps]), name="map_weights")
        # [CLS], [SEP]; not 0, so the root's score gets a gradient from the first step.
        self.root_weights = tf.Variable(tf.ones([2]), name="root_weights")
        self.vector_dim = vector_dim
        if vector_dim:
            self.dependent = tf.Variable(tf.zeros([vector_dim, num_maps]), name="dependent")
            self.head = tf.Variable(tf.zeros([vector_dim, num_maps]), name="head")

    def logits(self, batch):
        maps = batch["word_attention"]
        root_maps = tf.einsum("r,brmj->bmj", self.root_weights, batch["root_attention"])
        words = tf.einsum("m,bmji->bji", self.map_weights, maps)
        root = tf.einsum("m,bmj->bj", self.map_weights, root_maps)
        if self.vector_dim:
            dependent = tf.einsum("bjd,dm->bjm", batch["vectors"], self.dependent)
            head = tf.einsum("bid,dm->bim", batch["vectors"], self.head)
            words += (tf.einsum("bjm,bmji->bji", dependent, maps)
                      + tf.einsum("bim,bmji->bji", head, maps))
            root += tf.einsum("bjm,bmj->bj", dependent, root_maps)
        return tf.concat([root[..., None], words], -1)


def _glorot(shape, seed):
    limit = np.sqrt(6.0 / sum(shape))
    return tf.random.stateless_uniform(shape, [seed, len(shape)], -limit, limit)


class DistanceProbe(tf.Module):
    """Clark et al.'s "Distance + GloVe" baseline, no attention: one tanh layer of
    MLP_HIDDEN over the pair's distance features and both words' vectors."""

    def __init__(self, vector_dim, seed, hidden=MLP_HIDDEN):
        super().__init__()
        self.distance = tf.Variable(_glorot([NUM_DISTANCE_FEATURES, hidden], seed))
        self.dependent = tf.Variable(_glorot([vector_dim, hidden], seed + 1))
        self.head = tf.Variable(_glorot([vector_dim, hidden], seed + 2))
        self.bias = tf.Variable(tf.zeros([hidden]))
        self.output = tf.Variable(_glorot([hidden, 1], seed + 3)[:, 0])

    def logits(self, batch):
        dependent = tf.einsum("bjd,dh->bjh", batch["vectors"], self.dependent)
        head = tf.pad(tf.einsum("bid,dh->bih", batch["vectors"], self.head),
                      [[0, 0], [1, 0], [0, 0]])  # the root's vector is 0
        hidden = tf.tanh(tf.einsum("bjif,fh->bjih", batch["distance"], self.distance)
                         + dependent[:, :, None] + head[:, None] + self.bias)
        return tf.einsum("bjih,h->bji", hidden, self.output)


def right_branching(num_words):
    """Heads of the right-branching tree: each word's head is the next word, the last
    word is the root."""
    heads = np.arange(2, num_words + 2)
    heads[-1] = 0
    return heads


# ---------------------------------------------------------------------------
# Training and scoring


class Adam(tf.Module):
    """Bias-corrected Adam with TF's defaults (beta 0.9, 0.999, epsilon 1e-8), the optimizer
    of Clark et al.'s probes; TF's fused kernel does the update."""

    def __init__(self, variables, learning_rate):
        super().__init__()
        self.params = list(variables)
        self.m = [tf.Variable(tf.zeros_like(p), trainable=False) for p in self.params]
        self.v = [tf.Variable(tf.zeros_like(p), trainable=False) for p in self.params]
        self.steps = tf.Variable(0.0, trainable=False)
        self.learning_rate = learning_rate

    def apply(self, grads):
        self.steps.assign_add(1.0)
        powers = dict(beta1_power=tf.pow(0.9, self.steps), beta2_power=tf.pow(0.999, self.steps))
        for param, m, v, grad in zip(self.params, self.m, self.v, grads, strict=True):
            tf.raw_ops.ResourceApplyAdam(var=param.handle, m=m.handle, v=v.handle,
                                         lr=self.learning_rate, beta1=0.9, beta2=0.999,
                                         epsilon=1e-8, grad=grad, **powers)


def _masked_logits(probe, batch):
    return tf.where(batch["candidates"], probe.logits(batch), NOT_A_CANDIDATE)


def _loss(probe, batch, l2):
    """Mean cross-entropy of the gold head over the words that have one, plus l2 times
    the squared norm of the probe's weights."""
    heads = batch["heads"]
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(
        tf.maximum(heads, 0), _masked_logits(probe, batch))
    weights = tf.cast(heads >= 0, tf.float32)
    loss = tf.reduce_sum(losses * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)
    return loss + l2 * tf.add_n([tf.reduce_sum(v ** 2) for v in probe.trainable_variables])


def train(probe, batches, settings, seed, dev_batches=None):
    """Adam over the batches for settings.epochs passes, in a fresh random order each
    pass. With dev_batches, scores them after each pass and stops PATIENCE passes after
    the best; returns those dev UAS (empty without dev_batches)."""
    variables = probe.trainable_variables
    optimizer = Adam(variables, settings.learning_rate)
    l2 = tf.constant(settings.l2, tf.float32)

    @tf.function(reduce_retracing=True, autograph=False)
    def step(batch):
        with tf.GradientTape() as tape:
            loss = _loss(probe, batch, l2)
        optimizer.apply(tape.gradient(loss, variables))

    rng = np.random.default_rng(seed)
    dev_uas = []
    for _ in range(settings.epochs):
        for i in rng.permutation(len(batches)):
            step(batches[i])
        if dev_batches:
            dev_uas.append(probe_uas(probe, dev_batches))
            if len(dev_uas) - 1 - np.argmax(dev_uas) >= PATIENCE:
                break
    return dev_uas


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """How a dependency probe trains: Adam's rate, the L2 weight and the passes."""
    learning_rate: float
    l2: float
    epochs: int


@dataclasses.dataclass(frozen=True)
class TuningGrid:
    """What tune_and_train tries: every (learning rate, L2) pair, each for up to
    max_epochs passes (stopping after PATIENCE passes without a better dev UAS)."""
    learning_rates: tuple = LEARNING_RATES
    l2_weights: tuple = L2_WEIGHTS
    max_epochs: int = MAX_EPOCHS
    dev_fraction: float = DEV_FRACTION


def split_dev(sentences, fraction, seed):
    """(fit, dev): a seeded random share `fraction` of the sentences (at least one, at
    most all but one) as dev, the rest to fit; both keep the sentences' order."""
    num_dev = min(max(1, round(fraction * len(sentences))), len(sentences) - 1)
    is_dev = np.zeros(len(sentences), bool)
    is_dev[np.random.default_rng(seed).permutation(len(sentences))[:num_dev]] = True
    return ([s for s, d in zip(sentences, is_dev, strict=True) if not d],
            [s for s, d in zip(sentences, is_dev, strict=True) if d])


def tune_and_train(make_probe, sentences, inputs, grid, seed):
    """The one training rule of every dependency probe, so that they compare fairly.

    Holds out a dev part of the training sentences (split_dev), trains a fresh probe on
    the rest with each (learning rate, L2) of the grid, picks the setting and pass count
    with the best dev UAS (ties: the earlier in the grid, then fewer passes), and trains
    a fresh probe with them on all the sentences. The scored sentences are never seen.

    Args:
      make_probe: a function returning a fresh untrained probe.
      sentences: training ProbeSentences.
      inputs: the features the probe reads (see make_batch).
      grid: a TuningGrid.
      seed: seeds the dev split and the batch order.

    Returns:
      (trained probe, the chosen TrainSettings, per setting a dict of learning_rate, l2
      and dev_uas, the dev UAS after each pass).
    """
    fit, dev = split_dev(sentences, grid.dev_fraction, seed)
    fit_batches = make_batches(fit, inputs, TRAIN_BATCH_SIZE)
    dev_batches = make_batches(dev, inputs, EVAL_BATCH_SIZE)
    results, best_uas, best = [], -1.0, None
    for learning_rate in grid.learning_rates:
        for l2 in grid.l2_weights:
            history = train(make_probe(), fit_batches,
                            TrainSettings(learning_rate, l2, grid.max_epochs), seed, dev_batches)
            results.append({"learning_rate": learning_rate, "l2": l2, "dev_uas": history})
            if max(history) > best_uas:
                best_uas = max(history)
                best = TrainSettings(learning_rate, l2, int(np.argmax(history)) + 1)
    probe = make_probe()
    train(probe, make_batches(sentences, inputs, TRAIN_BATCH_SIZE), best, seed)
    return probe, best, results


def predict_heads(probe, batch):
    """[B, W] argmax candidate (0 = root) per word."""
    return tf.argmax(_masked_logits(probe, batch), -1, output_type=tf.int32).numpy()


def attachment_score(predicted, heads, scored):
    """UAS: correct / scored words, for equal-length arrays (or lists of them)."""
    predicted, heads, scored = (np.concatenate([np.ravel(a) for a in x])
                                for x in (predicted, heads, scored))
    total = int(scored.sum())
    return float((predicted == heads)[scored].sum() / total) if total else float("nan")


def probe_uas(probe, batches):
    """UAS of a trained probe over batches made by make_batches."""
    predicted = [predict_heads(probe, batch) for batch in batches]
    heads = [batch["heads"] for batch in batches]
    scored = [batch["scored"] for batch in batches]
    return attachment_score(predicted, heads, scored)


def right_branching_uas(sentences):
    return attachment_score([right_branching(len(s.heads)) for s in sentences],
                            [s.heads for s in sentences], [s.scored for s in sentences])


# ---------------------------------------------------------------------------
# Part-of-speech probe of a layer's word vectors


class LinearClassifier(tf.Module):
    def __init__(self, dim, num_classes):
        super().__init__()
        self.weights = tf.Variable(tf.zeros([dim, num_classes]))
        self.bias = tf.Variable(tf.zeros([num_classes]))

    def logits(self, x):
        return x @ self.weights + self.bias


def classifier_accuracy(train_x, train_y, eval_x, eval_y, num_classes, steps,
                        learning_rate=0.01):
    """Trains a linear softmax classifier on (train_x [N, D], train_y [N]) with full-batch
    Adam and returns its accuracy on (eval_x, eval_y); an eval label of -1 (a class
    unseen in training) always counts as wrong. Features are standardised with the
    training set's mean and deviation."""
    mean, std = train_x.mean(0), train_x.std(0) + 1e-6
    train_x = tf.constant((train_x - mean) / std, tf.float32)
    classifier = LinearClassifier(train_x.shape[1], num_classes)
    variables = classifier.trainable_variables
    optimizer = Adam(variables, learning_rate)

    @tf.function(autograph=False)
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                train_y, classifier.logits(train_x)))
        optimizer.apply(tape.gradient(loss, variables))

    for _ in range(steps):
        step()
    predicted = tf.argmax(classifier.logits(((eval_x - mean) / std).astype(np.float32)),
                          -1).numpy()
    return float(np.mean(predicted == eval_y))
