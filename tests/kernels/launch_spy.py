"""A test helper: a stand-in for a Triton kernel in its module that records each launch."""

from __future__ import annotations


class LaunchSpy:
    """Wraps a JITFunction (`monkeypatch.setattr(module, "name", LaunchSpy(module.name))`): `spy[grid](*args,
    **kwargs)` appends the grid to `grids`, the positional arguments to `calls` and the keyword ones to `options`,
    then launches the real kernel."""

    def __init__(self, fn):
        self.fn = fn
        self.grids: list = []
        self.calls: list[tuple] = []
        self.options: list[dict] = []

    def __getitem__(self, grid):
        launch = self.fn[grid]

        def run(*args, **kwargs):
            self.grids.append(grid)
            self.calls.append(args)
            self.options.append(kwargs)
            return launch(*args, **kwargs)

        return run
