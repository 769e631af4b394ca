"""The op set: a small ALU core plus buffer, movement, reduce, memory and loop ops."""

from __future__ import annotations

from enum import Enum, auto


class Ops(Enum):
    # -- ALU core (elementwise, shared by every level of the IR) --
    EXP2 = auto()
    LOG2 = auto()
    SIN = auto()
    SQRT = auto()
    RECIPROCAL = auto()
    NEG = auto()
    TRUNC = auto()
    ERF = auto()  # the error function: a primitive so GELU's gradient is one rule, not a polynomial's
    ADD = auto()
    MUL = auto()
    MAX = auto()
    MOD = auto()
    IDIV = auto()
    CMPLT = auto()
    CMPNE = auto()
    CMPEQ = auto()
    AND = auto()
    OR = auto()
    XOR = auto()
    SHL = auto()
    SHR = auto()
    WHERE = auto()
    THREEFRY = auto()  # src: (key0, key1, counter0, counter1) uint32; arg: which output word (0, 1): random bits
    CAST = auto()
    BITCAST = auto()
    # -- leaves --
    CONST = auto()  # arg: the Python value
    BUFFER = auto()  # arg: a Buffer (device memory); shape (size,)
    DEFINE_VAR = auto()  # arg: (name, lo, hi): a bounded symbolic integer (a Variable)
    BIND = auto()  # src: (DEFINE_VAR, CONST): a Variable's value for one call
    IOTA = auto()  # arg: n; the int64 vector 0..n-1 (as jax.lax.iota): arange without memory
    # -- tensor-level structure --
    RESHAPE = auto()  # arg: new shape
    PERMUTE = auto()  # arg: axis order
    EXPAND = auto()  # arg: new shape
    PAD = auto()  # arg: ((before, after), ...)
    SHRINK = auto()  # arg: ((start, end), ...)
    FLIP = auto()  # arg: tuple of flipped axes
    REDUCE_AXIS = auto()  # arg: (Ops.ADD | Ops.MAX, axes); keeps reduced dims as 1
    CONTIGUOUS = auto()  # a realize point asked for by the user
    DETACH = auto()  # stops gradients; a no-op for the scheduler
    CUSTOM_VJP = auto()  # src: (value, *primals); arg: the rule giving the primals' gradients; evaluates to value
    ASSIGN = auto()  # src: (target BUFFER view, value): write value into an existing buffer
    # -- tensor-level, resolved before scheduling (anneal.realize): the scheduler never sees them --
    REALIZED = auto()  # src: (buffer view, graph): a value computed earlier, kept with the graph that made it
    COPY = auto()  # src: (value,); arg: (from device, to device): the value moved to another device
    # -- kernel level --
    DEFINE_GLOBAL = auto()  # arg: slot number of a kernel argument buffer
    DEFINE_LOCAL = auto()  # src: (value, *tile ranges); arg: (slot, size): a tile in workgroup memory
    SPECIAL = auto()  # arg: (name, extent): the workgroup's index ("w") or the invocation's in it ("lid")
    RANGE = auto()  # src: (end,); arg: (id, kind[, origin id, stride]); an index 0..end-1 (anneal_schedule.opt)
    LOAD = auto()  # src: (DEFINE_GLOBAL, index[, valid]); reads 0 where not valid
    STORE = auto()  # src: (DEFINE_GLOBAL, index, value[, valid]): a store only where valid holds
    REDUCE = auto()  # src: (value, *ranges); arg: Ops.ADD | Ops.MAX
    SINK = auto()  # groups outputs; the root of every graph handed to a pass
    KERNEL = auto()  # arg: the kernel AST (a SINK of STOREs); src: the buffers it touches


class GroupOp:
    Unary = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC, Ops.ERF})
    Binary = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.MOD, Ops.IDIV, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
                        Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR})  # fmt: skip
    Ternary = frozenset({Ops.WHERE})
    ALU = Unary | Binary | Ternary
    Elementwise = ALU | frozenset({Ops.CAST, Ops.BITCAST, Ops.THREEFRY})
    Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR})
    Comparison = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
    Movement = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
    Leaves = frozenset({Ops.CONST, Ops.BUFFER, Ops.DEFINE_VAR, Ops.BIND, Ops.IOTA, Ops.DEFINE_GLOBAL})
