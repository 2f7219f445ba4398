"""Unit tests of the loader facts (``codemods/analysis/loaders.py``)."""

from __future__ import annotations

import textwrap

import libcst as cst

from ddp_migrate.codemods.analysis import ScriptAnalysis
from ddp_migrate.codemods.analysis.loaders import loader_facts


def _facts(source: str):
    analysis = ScriptAnalysis(cst.parse_module(textwrap.dedent(source)))
    return analysis, loader_facts(analysis)


def _loader(analysis: ScriptAnalysis, index: int) -> cst.Call:
    return analysis.loader_calls[index]


def test_facts_are_cached_per_analysis() -> None:
    analysis, facts = _facts("x = 1\n")
    assert loader_facts(analysis) is facts


def test_kwargs_keys_through_update_of_a_shared_dict() -> None:
    analysis, facts = _facts(
        """
        from torch.utils.data import DataLoader
        def main():
            kw = {"batch_size": 8}
            common = {"num_workers": 1, "shuffle": True}
            kw.update(common)
            kw["drop_last"] = True
            loader = DataLoader(ds, **kw)
        """
    )
    kwargs = facts.kwargs_dict(_loader(analysis, 0))
    assert kwargs is not None and kwargs.keys == {"batch_size", "num_workers", "shuffle", "drop_last"}


def test_kwargs_unknown_when_a_write_is_opaque() -> None:
    analysis, facts = _facts(
        """
        from torch.utils.data import DataLoader
        def main(extra):
            kw = {"batch_size": 8}
            kw.update(extra)
            loader = DataLoader(ds, **kw)
        """
    )
    kwargs = facts.kwargs_dict(_loader(analysis, 0))
    assert kwargs is not None and kwargs.keys is None


def test_no_kwargs_dict_without_double_star() -> None:
    analysis, facts = _facts("from torch.utils.data import DataLoader\nloader = DataLoader(ds, batch_size=8)\n")
    assert facts.kwargs_dict(_loader(analysis, 0)) is None


def test_loaders_in_a_dict_iterated_by_a_training_phase_loop() -> None:
    analysis, facts = _facts(
        """
        from torch.utils.data import DataLoader
        loaders = {x: DataLoader(sets[x]) for x in ["train", "val"]}
        for phase in ["train", "val"]:
            for x, y in loaders[phase]:
                loss = f(x, y)
                if phase == "train":
                    loss.backward()
        """
    )
    loader = _loader(analysis, 0)
    assert facts.dict_loaders[loader] == "loaders"
    assert loader in facts.dict_training
    assert loader not in facts.training_loaders and loader not in facts.evaluation_loaders


def test_iterator_driven_loader_trains() -> None:
    analysis, facts = _facts(
        """
        from torch.utils.data import DataLoader
        loader = DataLoader(ds, batch_size=8)
        it = iter(loader)
        while True:
            try:
                x, y = next(it)
            except StopIteration:
                break
            f(x, y).backward()
        """
    )
    assert _loader(analysis, 0) in facts.iterator_training
    assert _loader(analysis, 0) in facts.training_loaders


def test_shared_loop_trains_only_where_an_optimizer_is_passed() -> None:
    analysis, facts = _facts(
        """
        from torch.utils.data import DataLoader
        def run_epoch(loader, optimizer=None):
            training = optimizer is not None
            for x, y in loader:
                loss = f(x, y)
                if training:
                    loss.backward()
        train_loader = DataLoader(a)
        val_loader = DataLoader(b)
        run_epoch(train_loader, optimizer)
        run_epoch(val_loader, optimizer=None)
        """
    )
    train, val = _loader(analysis, 0), _loader(analysis, 1)
    assert train in facts.training_loaders and val not in facts.training_loaders
    assert val in facts.evaluated_by_call_site and val in facts.evaluation_loaders
    assert not hasattr(analysis, "training_loaders")  # one fact: the loader facts answer it


def test_unconditional_backward_trains_at_every_call_site() -> None:
    analysis, facts = _facts(
        """
        from torch.utils.data import DataLoader
        def run_epoch(loader, optimizer=None):
            for x, y in loader:
                f(x, y).backward()
        a_loader = DataLoader(a)
        b_loader = DataLoader(b)
        run_epoch(a_loader, optimizer)
        run_epoch(b_loader)
        """
    )
    assert {_loader(analysis, 0), _loader(analysis, 1)} <= facts.training_loaders


def test_spelling_skips_a_wrapper_made_inside_the_epoch_loop() -> None:
    analysis, facts = _facts(
        """
        from torch.utils.data import DataLoader
        loader = DataLoader(ds)
        for epoch in range(3):
            batches = tqdm(loader) if tqdm else loader
            for x, y in batches:
                f(x, y).backward()
        """
    )
    loader = _loader(analysis, 0)
    (epoch,) = analysis.epoch_loops(loader)
    spelled = facts.spelling_in(epoch.loop, loader, epoch.loader_expr)
    assert spelled is not None and analysis.module.code_for_node(spelled) == "loader"


def test_spelling_none_when_the_loader_is_made_inside_the_loop() -> None:
    analysis, facts = _facts(
        """
        from torch.utils.data import DataLoader
        for epoch in range(3):
            loader = DataLoader(ds)
            for x, y in loader:
                f(x, y).backward()
        """
    )
    loader = _loader(analysis, 0)
    (epoch,) = analysis.epoch_loops(loader)
    assert facts.spelling_in(epoch.loop, loader, epoch.loader_expr) is None


def test_iterator_restart_on_stop_iteration() -> None:
    analysis, facts = _facts(
        """
        from torch.utils.data import DataLoader
        loader = DataLoader(ds)
        it = iter(loader)
        for step in range(10):
            try:
                x, y = next(it)
            except StopIteration:
                it = iter(loader)
                x, y = next(it)
            f(x, y).backward()
        """
    )
    ((stmt, spelled),) = facts.iterator_restarts(_loader(analysis, 0))
    assert analysis.module.code_for_node(spelled) == "loader"
    assert "it = iter(loader)" in analysis.module.code_for_node(stmt)
