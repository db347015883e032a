"""The demo's recipe and its downstream verdict (the demo itself runs in `make demo`)."""

import collections

from bert_tf.tools import demo


def _flags(path):
    with open(path, encoding="utf-8") as f:
        return [line.split("=", 1) for line in f.read().splitlines()
                if line.startswith("--")]


def test_recipe_sets_each_flag_once_and_keeps_every_budget_checkpoint(tmp_path):
    recipe = demo.write_recipe(str(tmp_path), "c.json", "v.txt", {"train": "t*", "eval": "e*"},
                               str(tmp_path / "model"), demo.recipe_flags("classic", 2400),
                               save_every=300, keep_all=True)
    pairs = _flags(recipe)
    counts = collections.Counter(name for name, *_ in pairs)
    assert [name for name, n in counts.items() if n > 1] == []
    values = dict(p for p in pairs if len(p) == 2)
    assert values["--save_checkpoints_steps"] == "300"
    assert values["--keep_checkpoint_max"] == "9"  # 300, 600, ..., 2400 and one spare
    assert values["--num_warmup_steps"] == "200"


def test_model_config_takes_the_vocab_size_from_the_vocab(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"t{i}\n" for i in range(123)))
    from bert_tf.model.config import BertConfig

    config = BertConfig.from_json_file(demo.write_model_config(str(tmp_path), str(vocab),
                                                               num_hidden_layers=4))
    assert (config.vocab_size, config.num_hidden_layers) == (123, 4)
    assert config.hidden_size == demo.MODEL["hidden_size"]


def test_downstream_verdict_needs_every_seed_ahead():
    ahead = {"pretrained": [0.72, 0.74, 0.73], "random_init": [0.66, 0.70, 0.68],
             "majority_baseline": 0.33}
    assert "pretraining pays: +5.0 points" in demo.downstream_lines(ahead)[-1]
    overlapping = {**ahead, "pretrained": [0.69, 0.74, 0.73]}
    assert "within the seeds' spread" in demo.downstream_lines(overlapping)[-1]
    behind = {**ahead, "pretrained": [0.40, 0.45, 0.42]}
    assert "-25.7 points, every seed behind" in demo.downstream_lines(behind)[-1]


def test_auto_precision_is_bf16_only_where_the_cpu_multiplies_bfloat16():
    assert demo.pretraining_precision("auto", {"avx2", "avx512f", "avx512_bf16"}) == "bf16"
    assert demo.pretraining_precision("auto", {"avx2", "amx_bf16"}) == "bf16"
    assert demo.pretraining_precision("auto", {"avx2", "avx512f"}) == "fp32"
    assert demo.pretraining_precision("fp32", {"avx512_bf16"}) == "fp32"


def test_recipe_carries_the_precision_and_the_time_budget(tmp_path):
    recipe = demo.write_recipe(str(tmp_path), "c.json", "v.txt", {"train": "t*", "eval": "e*"},
                               str(tmp_path / "model"), demo.recipe_flags("budget"),
                               precision="bf16", max_train_time="4m")
    pairs = _flags(recipe)
    assert ["--precision", "bf16"] in pairs and ["--max_train_time", "4m"] in pairs
    assert ["--learning_rate_schedule", "triangle"] in pairs


def test_pretraining_gets_what_the_time_budget_leaves_after_a_reserve_for_the_rest():
    # 540 s in all, 60 spent, fine-tuning from random init took 50: it takes 50 again and
    # the rest after the updates REST_PER_FINETUNING x 50.
    reserve = 50 * (1 + demo.REST_PER_FINETUNING) + demo.RESERVE_MARGIN_SECONDS
    assert demo.pretraining_seconds(540, 60, 50) == 540 - 60 - reserve
    # A machine too slow for the budget still pretrains long enough to show something.
    assert demo.pretraining_seconds(540, 400, 200) == demo.MIN_PRETRAINING_SECONDS
    config = demo.DemoConfig(max_train_time="4m")
    assert demo.pretraining_budget(config, 0, 50) == "4m"
    assert demo.pretraining_budget(demo.DemoConfig(recipe="classic"), 0, 50) == ""


def test_budget_recipe_data_is_unmasked_single_segment_with_room_for_its_masks():
    """create_pretraining_data.py refuses --masked_lm_prob with --dynamic_masking; the records'
    masked positions must hold run_pretraining's 30% (its config check)."""
    recipe = demo.recipe_flags("budget")
    data = demo.data_flags(recipe)
    assert "--dynamic_masking=true" in data and "--next_sentence_prediction=false" in data
    assert not [f for f in data if f.startswith("--masked_lm_prob")]
    wanted = round(int(recipe["max_seq_length"]) * float(recipe["masked_lm_prob"]))
    assert int(recipe["max_predictions_per_seq"]) >= wanted
    classic = demo.data_flags(demo.recipe_flags("classic"))
    assert "--masked_lm_prob=0.15" in classic and "--next_sentence_prediction=true" in classic


def test_a_failed_step_names_its_log_file(tmp_path):
    log_file = tmp_path / "log.txt"
    try:
        demo.run_step("fails", ["python3", "-c", "print('boom'); raise SystemExit(3)"],
                      log_file=str(log_file))
    except demo.DemoError as e:
        assert "exit code 3" in str(e) and str(log_file) in str(e)
    else:
        raise AssertionError("no DemoError")
    assert log_file.read_text() == "boom\n"


def test_output_dir_is_replaced_only_when_an_earlier_demo_made_it(tmp_path, capsys):
    """Issue 37: --dupe_factor=0 removed --output_dir before failing on the flag, and any
    directory (e.g. --output_dir=runs) was removed. Checked before any download."""
    work = tmp_path / "runs"
    work.mkdir()
    (work / "model.ckpt").write_text("weeks of training")
    cache = tmp_path / "no_cache"
    assert demo.run(demo.DemoConfig(output_dir=str(work), cache_dir=str(cache),
                                    dupe_factor=0)) == 1
    assert "--dupe_factor must be an integer >= 1, got 0" in capsys.readouterr().err
    assert demo.run(demo.DemoConfig(output_dir=str(work), cache_dir=str(cache),
                                    max_train_time="4 minutes")) == 1
    assert "--max_train_time" in capsys.readouterr().err
    assert demo.run(demo.DemoConfig(output_dir=str(work), cache_dir=str(cache),
                                    time_budget="nine minutes")) == 1
    assert "--time_budget got 'nine minutes'" in capsys.readouterr().err
    assert demo.run(demo.DemoConfig(output_dir=str(work), cache_dir=str(cache),
                                    time_budget="")) == 1
    assert "--time_budget is empty and so is --max_train_time" in capsys.readouterr().err
    assert demo.run(demo.DemoConfig(output_dir=str(work), cache_dir=str(cache))) == 1
    assert (f"--output_dir={work} holds files not made by an earlier demo run (model.ckpt); "
            "demo replaces the whole directory" in capsys.readouterr().err)
    assert (work / "model.ckpt").read_text() == "weeks of training"
    assert not cache.exists()
    # An unwritable --cache_dir was an OSError traceback (PermissionError).
    assert demo.run(demo.DemoConfig(output_dir=str(tmp_path / "new"),
                                    cache_dir="/sys/kernel/bert_tf_demo")) == 1
    assert ("--cache_dir=/sys/kernel/bert_tf_demo is not writable (/sys/kernel: "
            in capsys.readouterr().err)
    from bert_tf.data.output_dir import check_output_dir, mark_as_owned

    mark_as_owned(work, "demo")  # what a demo run does to the directory it makes
    assert check_output_dir(work, "output_dir", command="demo") == str(work)
    older_demo = tmp_path / "demo_output"  # made before the owner mark existed
    for name in ("model", "corpus"):
        (older_demo / name).mkdir(parents=True)
    (older_demo / "pretrain.flags").write_text("--do_train\n")
    assert demo.check_config(demo.DemoConfig(output_dir=str(older_demo))) == str(older_demo)
