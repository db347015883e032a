"""Elastic training (--elastic, horovodrun's elastic mode): pretraining that goes on at each new
world size (distributed.ElasticState carries the state across the resets)."""

from collections.abc import Callable

from bert_tf.train import distributed
from bert_tf.train.config import PretrainingConfig
from bert_tf.train.faults import TrainingError
from bert_tf.train.report import Reporter
from bert_tf.train.resume import rederived_input_position
from bert_tf.train.state import TrainState


def train_elastic(train: Callable[..., dict], state: TrainState, config: PretrainingConfig,
                  checked_files: Callable[[], list], masking, report: Reporter) -> dict:
    """`train` (loop.train) under elastic Horovod (--elastic) on the files `checked_files()`
    returns (checked at each world size, split over its ranks). When a host leaves or joins, every
    rank resets and training goes on at the new world size with the same --global_batch_size,
    from the state after the last update (a host change announced by the driver) or as committed
    every --elastic_commit_every_n_steps updates (a rank lost without notice)."""
    elastic = distributed.ElasticState(state.checkpoint_variables(),
                                       input_ranks=distributed.size())

    def commit_or_check_hosts(step: int) -> None:
        if step % config.elastic_commit_every_n_steps == 0:
            elastic.commit()  # also checks for host changes
        else:
            elastic.check_host_updates()

    def train_at_current_size(elastic) -> dict:
        if report.enabled != (distributed.rank() == 0):
            raise TrainingError(
                f"{distributed.where()}: rank 0 moved to another process (its host left the "
                "job); only the first rank 0 writes checkpoints and logs, so the host of rank 0 "
                "must stay in the discovery script's output. Rerun the same command to resume "
                f"from the last checkpoint in --output_dir={config.output_dir}")
        distributed.check_shared_output_dir(config.output_dir)
        files = checked_files()
        _adapt_to_world_size(state, elastic, config, report)
        return train(state, state.config, files, masking, report,
                     after_save=commit_or_check_hosts)

    return distributed.run_elastic(train_at_current_size, elastic)


def _adapt_to_world_size(state: TrainState, elastic, config: PretrainingConfig,
                         report: Reporter) -> None:
    """After an elastic (re)start: this rank's dropout seed, the micro-batches per update for
    the world size and, when that changed, the input position re-derived as on a resume with
    another rank count (the same count of sequences consumed, so none skipped or repeated)."""
    ranks, batch = distributed.size(), config.train_batch_size
    state.set_rank(distributed.rank())
    state.set_accumulation_steps(config.accumulation_steps_for(ranks))
    was = elastic.input_ranks
    if was == ranks:
        return
    position = rederived_input_position(int(state.input_position.numpy()), (was, batch),
                                        (ranks, batch))
    state.input_position.assign(position)
    elastic.input_ranks = ranks
    elastic.save()  # a later sync broadcasts the variables and input_ranks together
    report.log(f"elastic: world size {was} -> {ranks} ranks at step {state.step}; "
               f"accumulation {config.accumulation_steps_for(was)} -> "
               f"{state.config.num_accumulation_steps} micro-batch(es) of {batch} per rank "
               f"(global batch {config.global_batch_size} kept); input position re-derived to "
               f"{position} micro-batches per rank")
