"""How precisely the data flow follows containers, instances and calls: the cases a review of the analysis
found, where following them too far rewrote correct code (``.module`` on a teacher or an optimizer taken from
a list), sharded an evaluation loader, or reported a decision that is the same on every rank; and where it
did not follow far enough (``sys.exit(main())``, a loader zipped through a wrapper, callbacks of several
classes in either order).
"""

from __future__ import annotations

from pathlib import Path

from migrated import migrate_script

MIXED_LIST = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    ds = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = DataLoader(ds, batch_size=16, shuffle=True)
    student = nn.Linear(8, 1)
    teacher = nn.Linear(8, 1)
    teacher.requires_grad_(False)
    optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
    for net in (student, teacher):
        print(net.weight.shape)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            with torch.no_grad():
                t = teacher(x)
            loss = ((student(x) - y) ** 2).mean() + ((student(x) - t) ** 2).mean()
            loss.backward()
            optimizer.step()
    for obj in [student, optimizer]:
        torch.save(obj.state_dict(), f"{type(obj).__name__}.pt")


if __name__ == "__main__":
    main()
'''

EXIT_MAIN = '''
import argparse
import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main(args):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ds = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = DataLoader(ds, batch_size=args.bs, shuffle=True)
    model = nn.Linear(8, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            loss = ((model(x.to(device)) - y.to(device)) ** 2).mean()
            loss.backward()
            optimizer.step()
    torch.save(model.state_dict(), "m.pt")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bs", type=int, default=16)
    args = parser.parse_args()
    sys.exit(main(args))
'''

COUNTERS = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Counter:
    def __init__(self):
        self.n = 0

    def add(self, v):
        self.n += v


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ds = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = DataLoader(ds, batch_size=16, shuffle=True)
    model = nn.Linear(8, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = Counter()
    losses = Counter()
    done = False
    for epoch in range(100):
        for x, y in loader:
            optimizer.zero_grad()
            loss = ((model(x.to(device)) - y.to(device)) ** 2).mean()
            loss.backward()
            optimizer.step()
            losses.n += loss.item()
            steps.n += 1
            if steps.n >= 10:
                done = True
                break
        if done:
            break
    print(losses.n)


if __name__ == "__main__":
    main()
'''

HELPER_DRAWS = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model, train_loader, val_loader):
        self.model = model
        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)
        self.train_loader = train_loader
        self.val_loader = val_loader
        self.train_it = iter(train_loader)
        self.val_it = iter(val_loader)

    def next_train(self):
        try:
            return next(self.train_it)
        except StopIteration:
            self.train_it = iter(self.train_loader)
            return next(self.train_it)

    def next_val(self):
        try:
            return next(self.val_it)
        except StopIteration:
            self.val_it = iter(self.val_loader)
            return next(self.val_it)

    def val_loss(self):
        x, y = self.next_val()
        with torch.no_grad():
            return ((self.model(x) - y) ** 2).mean().item()

    def fit(self, steps):
        for step in range(steps):
            x, y = self.next_train()
            self.opt.zero_grad()
            loss = ((self.model(x) - y) ** 2).mean()
            loss.backward()
            self.opt.step()
            if step % 10 == 0:
                print(step, self.val_loss())


def main():
    ds = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    train_loader = DataLoader(ds, batch_size=16, shuffle=True)
    val_loader = DataLoader(ds, batch_size=16)
    Trainer(nn.Linear(8, 1), train_loader, val_loader).fit(30)


if __name__ == "__main__":
    main()
'''

ZIPPED_WRAPPER = '''
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def log_every(iterable, freq):
    start = time.time()
    for i, obj in enumerate(iterable):
        if i % freq == 0:
            print(i, time.time() - start)
        yield obj


def main():
    ds = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = DataLoader(ds, batch_size=16, shuffle=True)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    max_steps = 100
    for epoch in range(2):
        for (x, y), step in zip(log_every(loader, 10), range(max_steps)):
            optimizer.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
'''

REORDERED = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    ds = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    train_loader = DataLoader(ds, batch_size=16, shuffle=True)
    val_loader = DataLoader(ds, batch_size=16)
    loaders = [val_loader]
    loaders.insert(0, train_loader)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loaders[0]:
            optimizer.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            for x, y in loaders[1]:
                print(((model(x) - y) ** 2).mean().item())


if __name__ == "__main__":
    main()
'''

WORKERS = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Logger:
    def step(self, model, optimizer, batch):
        print(len(batch))


class Learner:
    def step(self, model, optimizer, batch):
        x, y = batch
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()


def main():
    ds = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = DataLoader(ds, batch_size=16, shuffle=True)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    workers = [Learner(), Logger()]
    for epoch in range(2):
        for batch in loader:
            for w in workers:
                w.step(model, optimizer, batch)


if __name__ == "__main__":
    main()
'''



def test_a_loop_over_a_mixed_list_is_not_rewritten_as_the_wrapped_model(tmp_path: Path) -> None:
    text, report, _ = migrate_script(tmp_path, MIXED_LIST)
    assert "student = DistributedDataParallel(" in text
    assert "net.module" not in text and "obj.module" not in text, text


def test_sys_exit_of_main_sets_up_and_cleans_up_inside_main(tmp_path: Path) -> None:
    text, report, code = migrate_script(tmp_path, EXIT_MAIN)
    assert code == 0, report
    main = text[text.index("def main(args):"):text.index('if __name__ == "__main__":')]
    assert "runtime.setup(" in main and "runtime.cleanup()\n    return 0" in main, text


def test_two_instances_of_a_class_keep_their_own_values(tmp_path: Path) -> None:
    """``steps.n`` counts steps (the same on every rank); ``losses.n`` sums shard losses."""
    _, report, code = migrate_script(tmp_path, COUNTERS)
    assert code == 0 and "DDP041" not in report, report


def test_a_helper_drawing_only_for_a_printed_evaluation_leaves_its_loader_whole(tmp_path: Path) -> None:
    text, report, _ = migrate_script(tmp_path, HELPER_DRAWS)
    assert text.count("sampler=DistributedSampler(") == 1, text
    assert "val_loader = DataLoader(ds, batch_size=16)" in text


def test_a_loader_zipped_through_a_generator_of_the_program_is_sharded(tmp_path: Path) -> None:
    text, report, code = migrate_script(tmp_path, ZIPPED_WRAPPER)
    assert code == 0, report
    assert "sampler=DistributedSampler(ds, shuffle=True)" in text and "loader.sampler.set_epoch(epoch)" in text


def test_a_list_the_program_reorders_keeps_no_positions(tmp_path: Path) -> None:
    text, report, code = migrate_script(tmp_path, REORDERED)
    assert "sampler=" not in text, text  # which loader sits at [0] is not known: left to a human
    assert code == 1 and "DDP040" in report, report


def test_a_call_on_a_list_of_several_classes_reaches_each_method_in_either_order(tmp_path: Path) -> None:
    swapped = WORKERS.replace("workers = [Learner(), Logger()]", "workers = [Logger(), Learner()]")
    for number, source in enumerate((WORKERS, swapped)):
        folder = tmp_path / str(number)
        folder.mkdir()
        text, report, code = migrate_script(folder, source)
        assert code == 0, report
        assert "sampler=DistributedSampler(ds, shuffle=True)" in text and "DDP041" not in report, report


def test_a_tuple_assignment_pairs_its_names_and_a_loop_over_pairs_does_not() -> None:
    """``G, D = DP(G), DP(D)``: each name holds its own wrap; ``for net, path in ((G, "g"), (D, "d"))``: each name
    takes a part of every pair (a review found the pairing applied to loops too: ``net`` was never ``D``)."""
    import libcst as cst

    from ddp_migrate.codemods.analysis import ScriptAnalysis

    source = 'G, D = f(1), g(2)\nfor net, path in ((G, "g.pt"), (D, "d.pt")):\n    print(net, path)\n'
    analysis = ScriptAnalysis(cst.parse_module(source))
    reads = {node.value: node for node in analysis.preorder if type(node) is cst.Name and node.value in ("G", "net")}
    flows = {name: [cst.Module([]).code_for_node(v) for v in analysis.flows_into(node, name)] for name, node in reads.items()}
    assert flows["G"] == ["f(1)"], flows
    assert flows["net"] == ['((G, "g.pt"), (D, "d.pt"))'], flows
