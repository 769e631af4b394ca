"""anneal.einsum: torch.einsum's equations ("ij,jk->ik", "...ij,...jk", "ii->i", implicit outputs) as
movement ops, one broadcast product and one sum, so the scheduler sees the contraction it fuses anyway.

Each operand's repeated letters become its diagonal, then every operand is laid out over all the equation's
letters (size 1 where it lacks one), the operands multiply, and the letters not in the output are summed.
"""

from __future__ import annotations

import string
from typing import TYPE_CHECKING, Any

from anneal.errors import ShapeError

if TYPE_CHECKING:
    from anneal.tensor import Tensor

LETTERS = set(string.ascii_letters)


def _parse(equation: str, operands: tuple[Tensor, ...]) -> tuple[list[str], str]:
    """Each operand's letters (an ellipsis spelled out as upper-case-free private letters) and the output's."""
    eq = equation.replace(" ", "")
    inputs, arrow, output = eq.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
        raise ShapeError(f"einsum: the equation {equation!r} names {len(terms)} operands, {len(operands)} given")
    spare = iter(sorted(set("αβγδεζηθικλμνξοπρστυφχψω") - set(eq)))  # letters for the ellipsis' dims
    ellipsis_dims = 0
    for term, x in zip(terms, operands):
        if "..." in term:
            ellipsis_dims = max(ellipsis_dims, x.ndim - len(term.replace("...", "")))
    dots = "".join(next(spare) for _ in range(ellipsis_dims))
    spelled = []
    for term, x in zip(terms, operands):
        bad = set(term.replace("...", "")) - LETTERS
        if bad:
            raise ShapeError(f"einsum: {''.join(sorted(bad))!r} in {equation!r} is not a letter")
        named = len(term.replace("...", ""))
        own = x.ndim - named
        letters = term.replace("...", dots[ellipsis_dims - own :] if own > 0 else "") if "..." in term else term
        if len(letters) != x.ndim:
            raise ShapeError(f"einsum: operand {term!r} has {x.ndim} dims, shape {tuple(x.shape)}")
        spelled.append(letters)
    if arrow:
        out = output.replace("...", dots)
        unknown = set(out) - set("".join(spelled))
        if unknown:
            raise ShapeError(f"einsum: the output {output!r} names {''.join(sorted(unknown))!r}, in no operand")
        if len(set(out)) != len(out):
            raise ShapeError(f"einsum: the output {output!r} repeats a letter")
    else:  # implicit: the ellipsis, then the letters seen once, alphabetically
        counts = "".join(spelled)
        out = dots + "".join(sorted(c for c in set(counts) if counts.count(c) == 1 and c not in dots))
    return spelled, out


def _diagonals(x: Tensor, letters: str) -> tuple[Tensor, str]:
    """Repeated letters within one operand ("ii") take the diagonal, as torch."""
    while len(set(letters)) != len(letters):
        c = next(c for c in letters if letters.count(c) > 1)
        a = letters.index(c)
        b = letters.index(c, a + 1)
        x = x.diagonal(0, a, b)  # the diagonal goes last
        letters = letters[:a] + letters[a + 1 : b] + letters[b + 1 :] + c
    return x, letters


def einsum(equation: str, *operands: Any) -> Tensor:
    from anneal.tensor import Tensor

    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    tensors = tuple(o if isinstance(o, Tensor) else Tensor(o) for o in operands)
    spelled, out = _parse(equation, tensors)
    laid: list[Tensor] = []
    sizes: dict[str, int] = {}
    pairs = [_diagonals(x, letters) for x, letters in zip(tensors, spelled)]
    for x, letters in pairs:
        for c, size in zip(letters, x.shape):
            if sizes.setdefault(c, size) != size and size != 1 and sizes[c] != 1:
                raise ShapeError(f"einsum: {c!r} is {sizes[c]} in one operand and {size} in another "
                                 f"({equation!r})")  # fmt: skip
            sizes[c] = max(sizes[c], size)
    order = list(out) + sorted(set(sizes) - set(out))  # output letters first, then the summed ones
    for x, letters in pairs:
        perm = [letters.index(c) for c in order if c in letters]
        shaped = x.permute(*perm) if perm else x
        laid.append(shaped.reshape(*(sizes[c] if c in letters else 1 for c in order)) if order else shaped)
    product = laid[0]
    for t in laid[1:]:
        product = product * t
    product = product.expand(*(sizes[c] for c in order)) if order else product
    summed = tuple(range(len(out), len(order)))
    return product.sum(summed) if summed else product
