"""Every command keeps its flags (names, parsers, enum values, defaults) as they were before
the shared flag groups (bert_tf/train/config.py define_*_flags, bert_tf/data/shared_flags.py)
replaced the per-command definitions: EXPECTED is what each command defined then.

Run as a program it prints what each command defines now, as JSON (the test runs it in a
fresh process: absl's flags are global to a process)."""

import functools
import json
import os
import runpy
import sys

from conftest import REPO, run_command

SCRIPTS = ("run_pretraining.py", "run_finetuning.py", "create_pretraining_data.py")
OWN_COMMAND_LINE = {"convert"}  # parses its own sub-command and flags (tests/test_layout.py)


class _FlagsDefined(Exception):
    """Raised in place of absl's app.run: the command has defined its flags."""


def _flags_defined_by(run_as_main) -> dict:
    """{name: [parser, enum values, default]} of the flags `run_as_main` defines before it
    calls absl's app.run; they are deleted afterwards, so the next command can define its own."""
    from absl import app, flags

    before = set(flags.FLAGS)
    app.run = _stop
    try:
        run_as_main()
    except _FlagsDefined:
        pass
    defined = sorted(set(flags.FLAGS) - before)
    result = {}
    for name in defined:
        flag = flags.FLAGS[name]
        if flag.name == name:  # not a short alias
            result[name] = [type(flag.parser).__name__,
                            getattr(flag.parser, "enum_values", None), flag.default]
    for name in defined:
        delattr(flags.FLAGS, name)
    return result


def _stop(*args, **kwargs):
    raise _FlagsDefined


def flags_of_every_command() -> dict:
    import tensorflow  # noqa: F401  its own absl flags are defined here, before any command's

    from bert_tf.__main__ import COMMANDS

    found = {}
    for command, (module, _) in COMMANDS.items():
        if command not in OWN_COMMAND_LINE:
            found[command] = _flags_defined_by(
                functools.partial(runpy.run_module, module, run_name="__main__"))
    for script in SCRIPTS:
        found[script] = _flags_defined_by(
            functools.partial(runpy.run_path, str(REPO / script), run_name="__main__"))
    return found


# demo's two path defaults and doctor's --remote_python depend on where the repo, the home
# directory and the venv are.
# Captured from main at a8bd354, before the shared flag groups. doctor takes run_pretraining's
# flags and its own; `finetune` is run_finetuning.py.
PRETRAINING = {
    'adam_bias_correction': ('BooleanParser', None, False),
    'bert_config_file': ('ArgumentParser', None, None),
    'do_eval': ('BooleanParser', None, False),
    'do_train': ('BooleanParser', None, False),
    'dynamic_masking': ('BooleanParser', None, False),
    'do_whole_word_mask': ('BooleanParser', None, False),  # issue 34: with --dynamic_masking
    'elastic': ('BooleanParser', None, False),  # added after a8bd354 (elastic Horovod)
    'elastic_commit_every_n_steps': ('IntegerParser', None, 10),
    'eval_batch_size': ('IntegerParser', None, 8),
    'eval_files': ('ArgumentParser', None, ''),
    'exclude_from_layer_adaptation': ('ListParser', None, ['LayerNorm', 'layer_norm', 'bias']),
    'fp16_allreduce': ('BooleanParser', None, False),
    'deterministic': ('BooleanParser', None, False),
    'global_batch_size': ('IntegerParser', None, 0),
    'init_checkpoint': ('ArgumentParser', None, ''),
    'input_files': ('ArgumentParser', None, ''),
    'keep_checkpoint_max': ('IntegerParser', None, 5),
    'learning_rate': ('FloatParser', None, 5e-05),
    'log_every_n_steps': ('IntegerParser', None, 10),
    'max_eval_steps': ('IntegerParser', None, 100),
    'max_nonfinite_updates': ('IntegerParser', None, 25),
    'max_predictions_per_seq': ('IntegerParser', None, 20),
    'max_seq_length': ('IntegerParser', None, 128),
    'num_accumulation_steps': ('IntegerParser', None, 1),
    'num_train_steps': ('IntegerParser', None, 100000),
    'num_warmup_steps': ('IntegerParser', None, 10000),
    'optimizer_type': ('EnumParser', ['lamb', 'adamw'], 'lamb'),
    'output_dir': ('ArgumentParser', None, None),
    'peer_timeout_seconds': ('FloatParser', None, 900.0),
    'precision': ('EnumParser', ['fp32', 'fp16', 'bf16', 'amp'], 'fp32'),
    'save_checkpoints_steps': ('IntegerParser', None, 1000),
    'seed': ('IntegerParser', None, 12345),
    'time_to_train_sequences': ('FloatParser', None, 256000000.0),
    'train_batch_size': ('IntegerParser', None, 32),
    'use_xla': ('BooleanParser', None, False),
    'vocab_file': ('ArgumentParser', None, ''),
    'weight_decay_rate': ('FloatParser', None, 0.01),
    # The budget recipe's options (issue 44, docs/budget.md).
    'dropout': ('BooleanParser', None, True),
    'learning_rate_schedule': ('EnumParser', ['poly', 'triangle'], 'poly'),
    'masked_lm_prob': ('FloatParser', None, 0.15),  # doctor's own flag before issue 44
    'max_train_time': ('ArgumentParser', None, ''),
    'next_sentence_prediction': ('BooleanParser', None, True),
}
FINETUNING = {
    'adam_bias_correction': ('BooleanParser', None, False),
    'bert_config_file': ('ArgumentParser', None, None),
    'data_dir': ('ArgumentParser', None, None),
    'do_eval': ('BooleanParser', None, False),
    # None since issue 34: the vocab's tokenizer spec decides.
        'do_lower_case': ('BooleanParser', None, None),
        'allow_dictionary_mismatch': ('BooleanParser', None, False),
    'do_predict': ('BooleanParser', None, False),
    'do_train': ('BooleanParser', None, False),
    'eval_batch_size': ('IntegerParser', None, 64),
    'fp16_allreduce': ('BooleanParser', None, False),
    'deterministic': ('BooleanParser', None, False),
    'init_checkpoint': ('ArgumentParser', None, ''),
    'label_column': ('IntegerParser', None, 1),
    'learning_rate': ('FloatParser', None, 5e-05),
    'log_every_n_steps': ('IntegerParser', None, 10),
    'max_nonfinite_updates': ('IntegerParser', None, 25),
    'max_seq_length': ('IntegerParser', None, 128),
    'num_accumulation_steps': ('IntegerParser', None, 1),
    'num_train_epochs': ('FloatParser', None, 3.0),
    'output_dir': ('ArgumentParser', None, None),
    'peer_timeout_seconds': ('FloatParser', None, 900.0),
    'precision': ('EnumParser', ['fp32', 'fp16', 'bf16', 'amp'], 'fp32'),
    'reinit_top_layers': ('IntegerParser', None, 0),
    'rescale_embeddings': ('BooleanParser', None, False),
    'seed': ('IntegerParser', None, 12345),
    'task_name': ('EnumParser', ['pos', 'ner', 'cola', 'sst-2', 'mrpc', 'mnli', 'tsv'], None),
    'ner_lenient_tags': ('BooleanParser', None, False),
    'text_a_column': ('IntegerParser', None, 0),
    'text_b_column': ('IntegerParser', None, -1),
    'train_batch_size': ('IntegerParser', None, 32),
    'tsv_has_header': ('BooleanParser', None, False),
    'use_xla': ('BooleanParser', None, False),
    'vocab_file': ('ArgumentParser', None, None),
    'warmup_proportion': ('FloatParser', None, 0.1),
    'weight_decay_rate': ('FloatParser', None, 0.01),
}
EXPECTED = {
    'analyze_attention': {
        'batch_size': ('IntegerParser', None, 16),
        'bert_config_file': ('ArgumentParser', None, None),
        'conllu': ('ArgumentParser', None, None),
        # None since issue 34: the vocab's tokenizer spec decides.
        'do_lower_case': ('BooleanParser', None, None),
        'allow_dictionary_mismatch': ('BooleanParser', None, False),
        'init_checkpoint': ('ArgumentParser', None, None),
        'input_file': ('ArgumentParser', None, None),
        'js_rows_per_segment': ('IntegerParser', None, 16),
        'max_segments': ('IntegerParser', None, 1000),
        'max_seq_length': ('IntegerParser', None, 128),
        'mlm_gradient': ('BooleanParser', None, True),
        'output_dir': ('ArgumentParser', None, None),
        'seed': ('IntegerParser', None, 12345),
        'vocab_file': ('ArgumentParser', None, None),
        'word_level': ('BooleanParser', None, False),
    },
    'build_vocab': {
        # None since issue 34: the vocab's tokenizer spec decides.
        'do_lower_case': ('BooleanParser', None, None),
        'input_files': ('ArgumentParser', None, None),
        # Issue 34: the tokenizer recipe and its settings (None: the recipe's).
        'initial_alphabet': ('ArgumentParser', None, ''),
        'normalization': ('EnumParser', ['none', 'nfkc'], None),
        'strip_accents': ('BooleanParser', None, None),
        'tokenize_chinese_chars': ('BooleanParser', None, None),
        'tokenizer': ('EnumParser', ['bert', 'mecab', 'character', 'mecab-ko', 'sentencepiece'], 'bert'),
        'max_unique_chars': ('IntegerParser', None, 1000),
        'min_count': ('IntegerParser', None, 2),
        'num_unused_tokens': ('IntegerParser', None, 0),
        'vocab_file': ('ArgumentParser', None, None),
        'vocab_size': ('IntegerParser', None, 30522),
    },
    'create_pretraining_data.py': {
        'next_sentence_prediction': ('BooleanParser', None, True),  # issue 44
        # None since issue 34: the vocab's tokenizer spec decides.
        'do_lower_case': ('BooleanParser', None, None),
        'allow_dictionary_mismatch': ('BooleanParser', None, False),
        'do_whole_word_mask': ('BooleanParser', None, False),
        'dupe_factor': ('IntegerParser', None, 10),
        'dynamic_masking': ('BooleanParser', None, False),
        'input_file': ('ArgumentParser', None, None),
        'masked_lm_prob': ('FloatParser', None, 0.15),
        'max_predictions_per_seq': ('IntegerParser', None, 20),
        'max_seq_length': ('IntegerParser', None, 128),
        'num_workers': ('IntegerParser', None, 1),
        'output_file': ('ArgumentParser', None, None),
        'progress': ('BooleanParser', None, True),
        'random_seed': ('IntegerParser', None, 12345),
        'short_seq_prob': ('FloatParser', None, 0.1),
        'vocab_file': ('ArgumentParser', None, None),
    },
    'demo': {
        'cache_dir': ('ArgumentParser', None, os.path.join(os.path.expanduser("~"), ".cache", "bert_tf", "demo")),
        'dupe_factor': ('IntegerParser', None, 2),
        'num_train_steps': ('IntegerParser', None, 0),
        'max_train_time': ('ArgumentParser', None, ''),
        'time_budget': ('ArgumentParser', None, '9m'),
        'recipe': ('EnumParser', ['budget', 'classic'], 'budget'),
        'output_dir': ('ArgumentParser', None, os.path.join(REPO, "demo_output")),
        'precision': ('EnumParser', ('auto', 'fp32', 'bf16'), 'auto'),
    },
    'doctor': {**PRETRAINING,
        'gpu_memory_gb': ('FloatParser', None, None),
        'hosts': ('ListParser', None, None),
        'network_interface': ('ListParser', None, None),
        'remote_python': ('ArgumentParser', None, sys.executable),
        'ssh_identity_file': ('ArgumentParser', None, None),
        'ssh_port': ('IntegerParser', None, None),
    },
    'estimate': {
        'bert_config_file': ('ArgumentParser', None, None),
        'corpus_tokens': ('FloatParser', None, None),
        'efficiency': ('FloatParser', None, None),
        'epochs': ('FloatParser', None, 1.0),
        'global_batch_size': ('IntegerParser', None, None),
        # None since issue 27: the recipe's, else run_pretraining.py's 20 and 128.
        'max_predictions_per_seq': ('IntegerParser', None, None),
        'max_seq_length': ('IntegerParser', None, None),
        'metrics_file': ('ArgumentParser', None, None),
        'metrics_num_devices': ('IntegerParser', None, None),
        'model': ('EnumParser', ['tiny', 'base', 'large'], None),
        'num_devices': ('IntegerParser', None, 1),
        'num_sequences': ('FloatParser', None, None),
        'num_train_steps': ('IntegerParser', None, None),
        'peak_tflops': ('FloatParser', None, None),
        'price_per_device_hour': ('FloatParser', None, None),
        'sequences_per_second': ('FloatParser', None, None),
        # Issue 27: hardware presets and recipes.
        'fp16_allreduce': ('BooleanParser', None, None),
        'gpu': ('ArgumentParser', None, None),
        'gpus_per_node': ('IntegerParser', None, None),
        'instance': ('ArgumentParser', None, None),
        # Issue 35: every preset's memory and throughput confidence.
        'list_gpus': ('BooleanParser', None, False),
        'max_nodes': ('IntegerParser', None, 64),
        'network_gbps': ('FloatParser', None, None),
        'num_accumulation_steps': ('IntegerParser', None, None),
        'num_nodes': ('IntegerParser', None, 1),
        'precision': ('EnumParser', ['fp32', 'fp16', 'bf16', 'amp'], None),
        'price_per_hour': ('FloatParser', None, None),
        'recipe': ('ArgumentParser', None, None),
        'train_batch_size': ('IntegerParser', None, None),
        'use_xla': ('BooleanParser', None, None),
    },
    'finetune': FINETUNING,
    'format_text': {
        'input_files': ('ArgumentParser', None, None),
        'input_format': ('EnumParser', ['paragraphs', 'lines'], 'paragraphs'),
        'max_document_chars': ('IntegerParser', None, 20000),
        'min_document_chars': ('IntegerParser', None, 200),
        'num_shards': ('IntegerParser', None, 1),
        'output_dir': ('ArgumentParser', None, None),
    },
    'predict': {
        'bert_config_file': ('ArgumentParser', None, None),
        # None since issue 34: the vocab's tokenizer spec decides.
        'do_lower_case': ('BooleanParser', None, None),
        'allow_dictionary_mismatch': ('BooleanParser', None, False),
        'init_checkpoint': ('ArgumentParser', None, None),
        'json': ('BooleanParser', None, False),
        'text': ('ArgumentParser', None, None),
        'top_k': ('IntegerParser', None, 5),
        'vocab_file': ('ArgumentParser', None, None),
    },
    'prepare_dataset': {
        # None since issue 34: the vocab's tokenizer spec decides.
        'do_lower_case': ('BooleanParser', None, None),
        'allow_dictionary_mismatch': ('BooleanParser', None, False),
        'do_whole_word_mask': ('BooleanParser', None, False),
        'dupe_factor': ('IntegerParser', None, 5),
        'input_files': ('ArgumentParser', None, None),
        'masked_lm_prob': ('FloatParser', None, 0.15),
        'num_workers': ('IntegerParser', None, 1),
        'output_dir': ('ArgumentParser', None, None),
        'phases': ('ListParser', None, ['128:20', '512:80']),
        'progress': ('BooleanParser', None, True),
        'random_seed': ('IntegerParser', None, 12345),
        'shard_mb': ('FloatParser', None, 64.0),
        'short_seq_prob': ('FloatParser', None, 0.1),
        'vocab_file': ('ArgumentParser', None, None),
    },
    'probe_syntax': {
        'batch_size': ('IntegerParser', None, 32),
        'bert_config_file': ('ArgumentParser', None, None),
        'dependency_probes': ('BooleanParser', None, True),
        'dev_fraction': ('FloatParser', None, 0.15),
        # None since issue 34: the vocab's tokenizer spec decides.
        'do_lower_case': ('BooleanParser', None, None),
        'allow_dictionary_mismatch': ('BooleanParser', None, False),
        'eval_conllu': ('ArgumentParser', None, None),
        'init_checkpoint': ('ArgumentParser', None, None),
        'l2_weights': ('FloatParser', None, [0.0, 0.001]),
        'learning_rates': ('FloatParser', None, [0.001, 0.003, 0.01, 0.03]),
        'max_epochs': ('IntegerParser', None, 20),
        'max_eval_sentences': ('IntegerParser', None, 0),
        'max_seq_length': ('IntegerParser', None, 128),
        'output_dir': ('ArgumentParser', None, None),
        'random_init': ('BooleanParser', None, True),
        'seed': ('IntegerParser', None, 12345),
        'train_conllu': ('ArgumentParser', None, None),
        'train_sentences': ('IntegerParser', None, 1500),
        'upos_steps': ('IntegerParser', None, 300),
        'vocab_file': ('ArgumentParser', None, None),
    },
    'export': {  # added after a8bd354 (issue 36)
        'bert_config_file': ('ArgumentParser', None, ''),
        'checkpoint': ('ArgumentParser', None, None),
        'do_lower_case': ('BooleanParser', None, None),
        'format': ('EnumParser', ['savedmodel', 'keras_hub', 'onnx'], None),
        'jit_compile': ('BooleanParser', None, False),
        'labels': ('ListParser', None, None),
        'max_seq_length': ('IntegerParser', None, 0),
        'output_dir': ('ArgumentParser', None, None),
        'tagging': ('BooleanParser', None, False),
        'vocab_file': ('ArgumentParser', None, ''),
    },
    'run_finetuning.py': FINETUNING,
    # Issue 34.
    'tokenize': {
        'allow_dictionary_mismatch': ('BooleanParser', None, False),
        'do_lower_case': ('BooleanParser', None, None),
        'input_file': ('ArgumentParser', None, ''),
        'json': ('BooleanParser', None, False),
        'vocab_file': ('ArgumentParser', None, None),
    },
    'run_pretraining.py': PRETRAINING,
    'wikipedia': {
        'input_files': ('ArgumentParser', None, None),
        'num_workers': ('IntegerParser', None, 1),
        'output_dir': ('ArgumentParser', None, None),
        'progress': ('BooleanParser', None, True),
        'shard_mb': ('FloatParser', None, 64.0),
    },
}


def test_every_command_defines_the_flags_it_defined_before_the_shared_groups():
    proc = run_command([sys.executable, __file__], env={"PYTHONPATH": str(REPO)})
    now = json.loads(proc.stdout)
    expected = json.loads(json.dumps(EXPECTED))  # tuples as JSON lists, as `now` has them
    assert now.keys() == expected.keys()
    for command, flags in expected.items():
        assert now[command] == flags, command


if __name__ == "__main__":
    print(json.dumps(flags_of_every_command()))
