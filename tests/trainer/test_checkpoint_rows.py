"""Row shards in checkpoints: each rank saves its rows and their AdamW state; a resume on another
number of ranks re-cuts them exactly; the whole table can be read back for export."""
import pytest
import torch

from trainer import checkpoint
from trainer.memory import RowShardedMemory
from trainer.pretrain import lr_lambda

N, D = 37, 4  # 37 rows: not a multiple of 2 or 3


def _shards(world: int, steps: int = 0) -> list[RowShardedMemory]:
    shards = []
    for r in range(world):
        rows = RowShardedMemory(N, D, rank=r, world_size=world)
        rows.init_weights(0.5, seed=11)
        rows.make_optimizer(1e-2, (0.9, 0.99), 1e-8, 0.01, lr_lambda(100, 0.1))
        shards.append(rows)
    g = torch.Generator().manual_seed(5)
    full_grads = [torch.randn(N, D, generator=g) for _ in range(steps)]
    for grad in full_grads:  # the same full gradient, cut by rows: as if the ranks trained together
        for rows in shards:
            rows.weight.grad = grad[rows.row_start:rows.row_end].clone() * rows.world_size
            rows.step(clip=0.0)
    return shards


def _save(shards, tag_dir):
    tag_dir.mkdir(parents=True)
    for rows in shards:
        checkpoint.save_rows(rows, tag_dir)
    checkpoint.write_memory_layout(tag_dir, len(shards), shards[0])


def _full(shards, key):
    if key == "weight":
        return torch.cat([r.weight.detach() for r in shards])
    return torch.cat([r.optimizer.state[r.weight][key] for r in shards])


@pytest.mark.parametrize("new_world", [1, 2, 3])
def test_rows_and_adam_state_are_recut_for_another_number_of_ranks(tmp_path, new_world):
    saved = _shards(2, steps=3)
    _save(saved, tmp_path / "step")
    resumed = _shards(new_world)  # fresh weights and optimizer, then loaded
    same = [checkpoint.load_rows(rows, tmp_path / "step") for rows in resumed]
    assert all(same) == (new_world == 2)
    for key in ("weight", "exp_avg", "exp_avg_sq"):
        assert torch.equal(_full(resumed, key), _full(saved, key)), key
    for rows in resumed:
        assert rows.weight.shape[0] == rows.row_end - rows.row_start  # each rank holds only its rows
        assert int(rows.optimizer.state[rows.weight]["step"]) == 3
        assert rows.scheduler.last_epoch == saved[0].scheduler.last_epoch == 3
        assert rows.optimizer.param_groups[0]["lr"] == pytest.approx(saved[0].optimizer.param_groups[0]["lr"])


def test_resharded_training_continues_exactly(tmp_path):
    """Two more steps after a 2 -> 3 re-shard equal two more steps on the original 2 shards."""
    saved = _shards(2, steps=2)
    _save(saved, tmp_path / "step")
    resumed = _shards(3)
    for rows in resumed:
        checkpoint.load_rows(rows, tmp_path / "step")
    g = torch.Generator().manual_seed(9)
    for _ in range(2):
        grad = torch.randn(N, D, generator=g)
        for shards in (saved, resumed):
            for rows in shards:
                rows.weight.grad = grad[rows.row_start:rows.row_end].clone() * rows.world_size
                rows.step(clip=0.0)
    torch.testing.assert_close(_full(resumed, "weight"), _full(saved, "weight"), rtol=0, atol=1e-7)


def test_the_whole_table_reads_back_for_export(tmp_path):
    saved = _shards(3, steps=1)
    _save(saved, tmp_path / "step")
    table = checkpoint.read_rows(tmp_path / "step", 0, N, keys=("weight",))["weight"]
    assert torch.equal(table, _full(saved, "weight"))
    assert checkpoint.saved_partition(tmp_path, "step") == "rows"


def test_a_replicated_checkpoint_or_another_table_is_refused(tmp_path):
    saved = _shards(2)
    _save(saved, tmp_path / "rows")
    other = RowShardedMemory(N + 1, D)
    other.make_optimizer(1e-2, (0.9, 0.99), 1e-8, 0.0, lr_lambda(10, 0.1))
    with pytest.raises(SystemExit, match="38 x 4 in this run"):
        checkpoint.load_rows(other, tmp_path / "rows")
    (tmp_path / "repl").mkdir()
    checkpoint.write_memory_layout(tmp_path / "repl", 2)
    with pytest.raises(SystemExit, match="replicated"):
        checkpoint.load_rows(saved[0], tmp_path / "repl")
