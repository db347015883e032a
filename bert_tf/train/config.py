"""run_pretraining flags (defined once, Google/NVIDIA names) and the plain
`PretrainingConfig` they become, so other tools (doctor, estimate) can build
and validate one without parsing flags. The flag groups run_finetuning shares
(define_common_training_flags) are defined here, each default from the caller's config."""

import dataclasses
import re

from absl import flags

import bert_tf
from bert_tf.data import shared_flags
from bert_tf.data.numeric_flags import check_number


@dataclasses.dataclass(frozen=True)
class PrecisionMode:
    """What a --precision value means, for training, the memory estimate and the doctor."""

    compute_dtype: str  # the model's dtype ("amp": float32 graphs that the rewrite changes)
    activation_bytes: int  # per activation kept for the backward pass
    float16_on_gpu: bool  # float16 matmuls on a GPU: tensor-core shapes matter, loss scaling
    fast_cpu_flags: frozenset  # /proc/cpuinfo flags with native matmuls in this precision


_BF16_CPU = frozenset({"avx512_bf16", "amx_bf16"})
_FP16_CPU = frozenset({"avx512_fp16", "amx_fp16"})
PRECISION_MODES = {
    "fp32": PrecisionMode("float32", 4, False, frozenset()),
    "fp16": PrecisionMode("float16", 2, True, _FP16_CPU),
    "bf16": PrecisionMode("bfloat16", 2, False, _BF16_CPU),
    "amp": PrecisionMode("float32", 2, True, _BF16_CPU),  # bfloat16 rewrite on a CPU
}
PRECISIONS = tuple(PRECISION_MODES)
OPTIMIZER_TYPES = ("lamb", "adamw")
# poly: Google's and NVIDIA's warmup + polynomial decay; triangle: Cramming's one-cycle
# (optimization.learning_rate_at).
LEARNING_RATE_SCHEDULES = ("poly", "triangle")
_DURATION = re.compile(r"(?:(\d+(?:\.\d*)?)h)?(?:(\d+(?:\.\d*)?)m)?(?:(\d+(?:\.\d*)?)s?)?")


def duration_seconds(text: str, flag: str = "max_train_time") -> float:
    """Seconds of a duration such as "90s", "2.5m", "24h", "1h30m" or "600" (seconds); "" or
    "0": no limit (0.0). A PretrainingConfigError names --flag for anything else."""
    text = text.strip()
    if text in ("", "0"):
        return 0.0
    match = _DURATION.fullmatch(text)
    if not match or not any(match.groups()):
        _fail(flag, f"got {text!r}, not a duration: write e.g. 90s, 2.5m, 10m, 24h or 1h30m")
    hours, minutes, seconds = (float(g or 0) for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def xla_cpu_float32_output_matmuls(precision: str) -> bool:
    """Whether XLA on a CPU gets this precision's matmuls as half x half -> float32 dots, which
    its CPU backend runs in half precision (bf16; it computes half -> half dots in float32, and
    float16 dots in float32 either way). bench/README.md, "bf16 with XLA on a CPU"."""
    return PRECISION_MODES[precision].compute_dtype == "bfloat16"


class PretrainingConfigError(ValueError):
    """A flag value that cannot work; the message names the flag."""


@dataclasses.dataclass
class PretrainingConfig:
    bert_config_file: str
    output_dir: str
    input_files: str = ""
    eval_files: str = ""
    init_checkpoint: str = ""
    train_batch_size: int = 32
    eval_batch_size: int = 8
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    dynamic_masking: bool = False
    # With dynamic_masking the rate training masks at; else the records' (doctor checks it).
    masked_lm_prob: float = 0.15
    next_sentence_prediction: bool = True
    dropout: bool = True  # False: bert_config.json's dropout rates are 0 while pretraining
    do_whole_word_mask: bool = False  # with dynamic_masking: words of the vocab's splitter
    vocab_file: str = ""
    num_train_steps: int = 100_000
    num_warmup_steps: int = 10_000
    learning_rate: float = 5e-5
    learning_rate_schedule: str = "poly"
    max_train_time: str = ""  # a wall-clock budget (duration_seconds); "": none
    optimizer_type: str = "lamb"
    weight_decay_rate: float = 0.01
    adam_bias_correction: bool = False  # Google's AdamW has none
    num_accumulation_steps: int = 1
    precision: str = "fp32"
    use_xla: bool = False
    fp16_allreduce: bool = False
    deterministic: bool = False
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    log_every_n_steps: int = 10
    do_train: bool = False
    do_eval: bool = False
    max_eval_steps: int = 100
    seed: int = 12345
    max_nonfinite_updates: int = 25
    peer_timeout_seconds: float = 900.0
    elastic: bool = False
    global_batch_size: int = 0  # with --elastic: sequences per update at every world size
    elastic_commit_every_n_steps: int = 10
    time_to_train_sequences: float = 256e6
    # LAMB: variables (regexes) without a trust ratio; () = all have one (NVIDIA TensorFlow).
    exclude_from_layer_adaptation: tuple[str, ...] = ("LayerNorm", "layer_norm", "bias")

    def validate(self) -> None:
        """Raises PretrainingConfigError naming the first flag that cannot work."""
        self._validate_task()
        self._validate_sizes()
        self._validate_optimization()
        self._validate_elastic()

    def _validate_task(self) -> None:
        if not (self.do_train or self.do_eval):
            _fail("do_train", "or --do_eval must be set (nothing to do)")
        if not self.bert_config_file:
            _fail("bert_config_file", "is required (the model's bert_config.json)")
        if not self.output_dir:
            _fail("output_dir", "is required (checkpoints and logs go there)")
        if self.do_train and not self.input_files:
            _fail("input_files", "is required with --do_train (TFRecord globs, comma separated)")
        if self.do_eval and not self.eval_files:
            _fail("eval_files", "is required with --do_eval (TFRecord globs, comma separated)")
        if self.dynamic_masking and not self.vocab_file:
            _fail("vocab_file", "is required with --dynamic_masking (the vocab the data was made "
                  "with: [MASK] and the random replacement tokens come from it)")
        if self.do_whole_word_mask and not self.dynamic_masking:
            _fail("do_whole_word_mask", "needs --dynamic_masking: masked records were masked when "
                  "they were written (create_pretraining_data.py --do_whole_word_mask)")

    def _validate_sizes(self) -> None:
        for name in ("train_batch_size", "eval_batch_size", "max_seq_length",
                     "max_predictions_per_seq", "num_train_steps", "num_accumulation_steps",
                     "save_checkpoints_steps", "keep_checkpoint_max", "log_every_n_steps",
                     "max_eval_steps", "max_nonfinite_updates"):
            check_number(name, getattr(self, name), at_least=1, integer=True,
                         error=PretrainingConfigError)
        check_number("num_warmup_steps", self.num_warmup_steps, integer=True,
                     error=PretrainingConfigError)
        if not 0 <= self.num_warmup_steps <= self.num_train_steps:
            _fail("num_warmup_steps", f"must be in [0, --num_train_steps={self.num_train_steps}], "
                  f"got {self.num_warmup_steps}")
        if self.max_predictions_per_seq > self.max_seq_length:
            _fail("max_predictions_per_seq", f"({self.max_predictions_per_seq}) cannot exceed "
                  f"--max_seq_length ({self.max_seq_length})")
        check_number("masked_lm_prob", self.masked_lm_prob, above=0, below=1,
                     error=PretrainingConfigError)
        wanted = round(self.max_seq_length * self.masked_lm_prob)
        if self.dynamic_masking and wanted > self.max_predictions_per_seq:
            # records.num_to_predict would cap it silently: a 40% rate would train at 16%.
            _fail("max_predictions_per_seq", f"({self.max_predictions_per_seq}) caps "
                  f"--masked_lm_prob={self.masked_lm_prob} at {self.max_predictions_per_seq} of "
                  f"{self.max_seq_length} tokens: use --max_predictions_per_seq={wanted}, "
                  "here and in create_pretraining_data.py (the records' schema holds that many)")
        duration_seconds(self.max_train_time)

    def _validate_optimization(self) -> None:
        check_number("learning_rate", self.learning_rate, above=0, error=PretrainingConfigError)
        check_number("weight_decay_rate", self.weight_decay_rate, at_least=0,
                     error=PretrainingConfigError)
        check_number("peer_timeout_seconds", self.peer_timeout_seconds, at_least=0,
                     error=PretrainingConfigError)
        check_number("time_to_train_sequences", self.time_to_train_sequences, above=0,
                     error=PretrainingConfigError)
        _check_patterns("exclude_from_layer_adaptation", self.exclude_from_layer_adaptation)
        if self.optimizer_type not in OPTIMIZER_TYPES:
            _fail("optimizer_type", f"must be one of {', '.join(OPTIMIZER_TYPES)}")
        if self.learning_rate_schedule not in LEARNING_RATE_SCHEDULES:
            _fail("learning_rate_schedule", f"must be one of {', '.join(LEARNING_RATE_SCHEDULES)}")
        if self.precision not in PRECISIONS:
            _fail("precision", f"must be one of {', '.join(PRECISIONS)}")


    def _validate_elastic(self) -> None:
        if not self.elastic:
            return
        if self.elastic_commit_every_n_steps < 1:
            _fail("elastic_commit_every_n_steps", f"must be >= 1, got "
                  f"{self.elastic_commit_every_n_steps}")
        if self.global_batch_size < 1:
            _fail("global_batch_size", "is required with --elastic (the sequences per update, "
                  "kept at every world size by adjusting --num_accumulation_steps)")
        if self.global_batch_size % self.train_batch_size:
            _fail("global_batch_size", f"({self.global_batch_size}) must be a multiple of "
                  f"--train_batch_size ({self.train_batch_size})")

    def accumulation_steps_for(self, world_size: int) -> int:
        """--elastic: the micro-batches per update that keep --global_batch_size at
        `world_size` ranks; a PretrainingConfigError names the world sizes that would work."""
        micro_batches = self.global_batch_size // self.train_batch_size  # over all ranks
        if micro_batches % world_size:
            working = [n for n in range(1, micro_batches + 1) if micro_batches % n == 0]
            _fail("global_batch_size", f"({self.global_batch_size}) is not a multiple of "
                  f"--train_batch_size x ranks = {self.train_batch_size} x {world_size}: elastic "
                  f"training cannot keep it at {world_size} ranks. World sizes that can: "
                  f"{', '.join(map(str, working))}; keep horovodrun --min-np/--max-np and the "
                  "discovery script's slots to those, or change --global_batch_size")
        return micro_batches // world_size


def _fail(flag, problem):
    raise PretrainingConfigError(f"--{flag} {problem}")


def _check_patterns(flag: str, patterns) -> None:
    """Raises PretrainingConfigError naming --flag if a pattern is not a valid regex."""
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as e:
            raise PretrainingConfigError(
                f"--{flag}: {pattern!r} is not a regular expression ({e})") from None


def define_model_flags(defaults: dict) -> None:
    """The model a run starts from and where it writes (pretraining and fine-tuning)."""
    flags.DEFINE_string("bert_config_file", defaults["bert_config_file"],
                        "bert_config.json of the model.")
    flags.DEFINE_string("init_checkpoint", defaults["init_checkpoint"],
                        "Checkpoint (prefix or directory) to initialise the model weights from: "
                        "ours (e.g. the end of phase 1), Google's bert_model.ckpt, or Hugging "
                        "Face weights converted with python -m bert_tf convert. Optimizer state "
                        "and step are not taken from it. Empty: random initialisation.")
    flags.DEFINE_string("vocab_file", defaults["vocab_file"],
                        "WordPiece vocab of the model and its data (pretraining needs it only "
                        "for --dynamic_masking).")
    flags.DEFINE_string("output_dir", defaults["output_dir"],
                        "Checkpoints, metrics.jsonl, summaries and results go here. Rerunning "
                        "the same command with the same directory resumes.")


def define_batch_flags(defaults: dict) -> None:
    """What a micro-batch holds and how many make an update (pretraining and fine-tuning)."""
    flags.DEFINE_integer("max_seq_length", defaults["max_seq_length"],
                         "Word pieces per sequence, [CLS] and [SEP] included. Pretraining: must "
                         "match the records. Fine-tuning: longer sentences are split (tagging) "
                         "or truncated (classification), and counted.")
    flags.DEFINE_integer("train_batch_size", defaults["train_batch_size"],
                         "Sequences per micro-batch per rank.")
    flags.DEFINE_integer("eval_batch_size", defaults["eval_batch_size"],
                         "Sequences per eval/predict batch per rank.")
    flags.DEFINE_integer("num_accumulation_steps", defaults["num_accumulation_steps"],
                         "Micro-batches accumulated per optimizer update.")


def define_optimization_flags(defaults: dict) -> None:
    """How an update is computed (pretraining and fine-tuning)."""
    flags.DEFINE_float("learning_rate", defaults["learning_rate"], "Peak learning rate.")
    flags.DEFINE_float("weight_decay_rate", defaults["weight_decay_rate"],
                       "Decoupled weight decay (not applied to LayerNorm and bias).")
    flags.DEFINE_bool("adam_bias_correction", defaults["adam_bias_correction"],
                      "AdamW (fine-tuning; pretraining with --optimizer_type=adamw): correct "
                      "Adam's moments for their zero start, as Keras, PyTorch and Model Garden "
                      "do. Google's BERT does not, so its first updates are 3.2x larger; "
                      "Mosbach et al. 2021 trace failed fine-tuning runs on small datasets to "
                      "that. LAMB always corrects.")
    flags.DEFINE_enum("precision", defaults["precision"], PRECISIONS,
                      "fp32; fp16 (dynamic loss scaling); bf16; amp (TF's automatic mixed "
                      "precision graph rewrite: fp16 on GPU, bf16 on CPU).")
    flags.DEFINE_bool("use_xla", defaults["use_xla"],
                      "Compile the forward/backward computation with XLA (jit_compile).")
    flags.DEFINE_bool("fp16_allreduce", defaults["fp16_allreduce"],
                      "Compress gradients to float16 for the allreduce.")
    flags.DEFINE_bool("deterministic", defaults["deterministic"],
                      "TensorFlow's op determinism (tf.config.experimental."
                      "enable_op_determinism): bit-identical reruns and resumes on GPUs too, at "
                      "some speed (docs/running.md, 'What is reproducible where').")
    flags.DEFINE_integer("seed", defaults["seed"],
                         "Seed of the weight initialisation and the input order.")


def define_run_flags(defaults: dict) -> None:
    """What a run does, what it logs and when it gives up (pretraining and fine-tuning)."""
    flags.DEFINE_bool("do_train", defaults["do_train"], "Train.")
    flags.DEFINE_bool("do_eval", defaults["do_eval"],
                      "Evaluate: pretraining on --eval_files after training; fine-tuning on the "
                      "dev split after every epoch, keeping the best checkpoint in "
                      "OUTPUT_DIR/best.")
    flags.DEFINE_integer("log_every_n_steps", defaults["log_every_n_steps"],
                         "Updates between metrics.jsonl / TensorBoard entries.")
    flags.DEFINE_integer("max_nonfinite_updates", defaults["max_nonfinite_updates"],
                         "Stop when this many updates in a row have non-finite gradients.")
    flags.DEFINE_float("peer_timeout_seconds", defaults["peer_timeout_seconds"],
                       "A multi-rank run exits with an error when no update completes for "
                       "this long (a dead or hung peer); 0 disables.")


def define_common_training_flags(defaults: dict) -> None:
    """The flags run_pretraining and run_finetuning share, defaults from the caller's config
    (bert_tf.flag_defaults)."""
    define_model_flags(defaults)
    define_batch_flags(defaults)
    define_optimization_flags(defaults)
    define_run_flags(defaults)


def define_pretraining_flags() -> None:
    """Defines every run_pretraining flag (call once, before parsing)."""
    d = bert_tf.flag_defaults(PretrainingConfig)
    define_common_training_flags(d)
    flags.DEFINE_string("input_files", "", "TFRecord files from create_pretraining_data.py: "
                        "comma-separated globs.")
    flags.DEFINE_string("eval_files", "", "TFRecord files for --do_eval: comma-separated globs.")
    flags.DEFINE_integer("max_predictions_per_seq", d["max_predictions_per_seq"],
                         "Masked positions per record (must match the data).")
    flags.DEFINE_bool("dynamic_masking", d["dynamic_masking"],
                      "Choose the masked positions anew at every step (RoBERTa style) on "
                      "unmasked records from create_pretraining_data.py --dynamic_masking. "
                      "Needs --vocab_file.")
    flags.DEFINE_float("masked_lm_prob", d["masked_lm_prob"],
                       "Share of each sequence's tokens masked, at most --max_predictions_per_seq"
                       " (15% in Google's BERT; 25-40% trains faster, docs/budget.md): with "
                       "--dynamic_masking the rate training masks at, else the one the records "
                       "were made with (create_pretraining_data.py --masked_lm_prob; doctor "
                       "checks --max_predictions_per_seq against it).")
    shared_flags.define_whole_word_mask_flag(d)
    shared_flags.define_next_sentence_flag(d)
    flags.DEFINE_bool("dropout", d["dropout"],
                      "Dropout while pretraining at bert_config.json's rates. false: none "
                      "(Cramming's budget recipe, docs/budget.md); bert_config.json keeps its "
                      "rates for fine-tuning.")
    _define_schedule_flags(d)
    flags.DEFINE_integer("max_eval_steps", d["max_eval_steps"],
                         "Maximum eval batches per rank.")
    _define_elastic_flags(d)
    flags.DEFINE_float("time_to_train_sequences", d["time_to_train_sequences"],
                       "The final summary estimates the time to train on this many sequences "
                       "(default: Google's BERT-base schedule, 1M steps x 256).")


def _define_elastic_flags(d: dict) -> None:
    """Elastic Horovod (docs/running.md)."""
    flags.DEFINE_bool("elastic", d["elastic"],
                      "Elastic Horovod (horovodrun --min-np --max-np --host-discovery-script): "
                      "training goes on when hosts leave or join, keeping --global_batch_size by "
                      "adjusting --num_accumulation_steps to the world size.")
    flags.DEFINE_integer("global_batch_size", d["global_batch_size"],
                         "--elastic: sequences per optimizer update over all ranks (required); "
                         "--num_accumulation_steps = this / (--train_batch_size x ranks).")
    flags.DEFINE_integer("elastic_commit_every_n_steps", d["elastic_commit_every_n_steps"],
                         "--elastic: keep a copy of the training state in memory every this many "
                         "updates; a lost rank rolls the others back to it.")


def _define_schedule_flags(d: dict) -> None:
    """Pretraining's optimizer, schedule and checkpointing."""
    flags.DEFINE_integer("num_train_steps", d["num_train_steps"],
                         "Optimizer updates to train for (each is num_accumulation_steps "
                         "micro-batches on every rank).")
    flags.DEFINE_integer("num_warmup_steps", d["num_warmup_steps"],
                         "--learning_rate_schedule=poly: updates of linear learning-rate warmup "
                         "(with --max_train_time: the same share of the budget).")
    flags.DEFINE_enum("learning_rate_schedule", d["learning_rate_schedule"],
                      LEARNING_RATE_SCHEDULES,
                      "poly: linear warmup, then polynomial decay to 0 (Google, NVIDIA). "
                      "triangle: from a quarter of --learning_rate up to it at 3/4 of the run, "
                      "then linearly to 0 (Cramming's budget schedule, docs/budget.md).")
    flags.DEFINE_string("max_train_time", d["max_train_time"],
                        "A wall-clock budget for the updates (e.g. 10m, 2.5m, 24h, 1h30m): the "
                        "schedule follows the share of it spent (or of --num_train_steps, "
                        "whichever is further), and training ends with a checkpoint (and "
                        "--do_eval) when it is spent. A resumed run keeps the time already "
                        "spent. Empty: no budget.")
    flags.DEFINE_enum("optimizer_type", d["optimizer_type"], OPTIMIZER_TYPES,
                      "lamb (NVIDIA's recipes; poly decay power 0.5) or adamw (Google's "
                      "AdamWeightDecay; linear decay).")
    flags.DEFINE_list("exclude_from_layer_adaptation", list(d["exclude_from_layer_adaptation"]),
                      "LAMB: comma-separated regexes of the variables that get no trust ratio "
                      "(default: LayerNorm and bias, as NVIDIA's PyTorch LAMB). Empty "
                      "(--exclude_from_layer_adaptation=) gives every variable one, as NVIDIA's "
                      "TensorFlow 1 and 2 LAMB and launch/recipes/. Matched by name, so "
                      "--weight_decay_rate=0 does not change it.")
    flags.DEFINE_integer("save_checkpoints_steps", d["save_checkpoints_steps"],
                         "Save a checkpoint every this many updates (and at the end).")
    flags.DEFINE_integer("keep_checkpoint_max", d["keep_checkpoint_max"],
                         "Checkpoints kept in --output_dir.")


def pretraining_config_from_flags(flag_values) -> PretrainingConfig:
    """A PretrainingConfig from parsed absl flags (call .validate() to check it)."""
    config = bert_tf.config_from_flags(PretrainingConfig, flag_values)
    config.exclude_from_layer_adaptation = tuple(config.exclude_from_layer_adaptation)
    return config
