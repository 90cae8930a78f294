"""What an expression holds, as far as one file shows: a cell class, an ``nn.scan`` of one, a cell
instance, an ``nn.RNN``, or nothing the checker knows.

The rules need more than import names: real code keeps a cell class in a dataclass field
(``cell_type: type = nn.GRUCell``), stores ``nn.scan(nn.LSTMCell, ...)`` on ``self`` in ``setup``,
returns it from a helper method, or builds a cell once and calls ``cell.initialize_carry`` later.
:class:`Kinds` follows those bindings inside one parsed unit: local assignments in the enclosing
functions, class-body fields and ``self.x = ...`` in any method of the class, the one value a
method (or a ``@property``) returns, and ``rnn.cell`` of an ``nn.RNN``. Containers are followed
too: an element of a list, tuple or comprehension of cells (``self.lstm[i]`` after
``self.lstm = [nn.ConvLSTM(...) for _ in range(n)]`` in ``setup``), and what a ``for`` loop
binds from one, directly or through ``zip`` and ``enumerate``. A name bound more than once to
things of different kinds, or by an unpacking it cannot follow, is unknown.
"""

from __future__ import annotations

import ast
import dataclasses

from rnnlib.migrate.names import _SCANS, _Names

# Kind tags.
CLASS = "class"  # a cell class: nn.LSTMCell, a field holding it, `Cell = nn.GRUCell`
SCAN = "scan"  # nn.scan(<cell class>, ...): a class too, lifted
INSTANCE = "instance"  # a cell module: nn.LSTMCell(...), nn.scan(...)(...)
RNN = "rnn"  # nn.RNN(...)
CARRY = "carry"  # what an old initialize_carry call returned (its `size` is the width)

_UNKNOWN = object()  # a binding whose value the resolver does not follow
ELEMENT = "element"  # (ELEMENT, part, iterated): what a for loop over `iterated` binds
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Module)


@dataclasses.dataclass(frozen=True)
class Kind:
    """What an expression holds. ``family`` and ``cell`` name the cell class (``("flax",
    "LSTMCell")``); ``node`` is the call that made it (the constructor call of an instance, the
    ``nn.scan`` call of a lifted class, the ``nn.RNN`` call, the old ``initialize_carry`` call of
    a carry); ``via`` says how the class was reached when it was not spelled out (``"field"``,
    ``"attribute"``, ``"variable"``), and ``scanned`` whether an instance is of a lifted class."""

    tag: str
    family: str | None = None
    cell: str | None = None
    node: ast.AST | None = dataclasses.field(default=None, compare=False)
    via: str | None = None
    scanned: bool = False


class Kinds:
    """Resolves expressions of one parsed unit (see the module docstring)."""

    def __init__(self, tree, names: _Names, parents: dict):
        self.names, self.parents = names, parents
        self.assigned: dict[int, dict[str, list]] = {}  # scope id -> name -> values
        self.params: dict[int, set[str]] = {}  # scope id -> parameter names
        self.attrs: dict[int, dict[str, list]] = {}  # class id -> attribute -> values
        self.fields: dict[int, set[str]] = {}  # class id -> names set in the class body
        self.returns: dict[int, dict[str, list]] = {}  # class id -> method -> returned values
        self.properties: dict[int, set[str]] = {}  # class id -> methods that are @property
        for node in ast.walk(tree):
            self._collect(node)

    # ------------------------------------------------------------------ collecting bindings

    def scope_of(self, node):
        """The function (or module) whose local names `node` sees first."""
        node = self.parents.get(id(node))
        while node is not None and not isinstance(node, _SCOPES):
            node = self.parents.get(id(node))
        return node

    def class_of(self, node):
        """The class a method containing `node` belongs to, when its first parameter is
        the receiver (``self``)."""
        scope = self.scope_of(node)
        while scope is not None and not isinstance(scope, ast.Module):
            owner = self.parents.get(id(scope))
            if isinstance(owner, ast.ClassDef):
                return owner
            scope = self.scope_of(scope)
        return None

    def _bind(self, scope, name, value):
        self.assigned.setdefault(id(scope), {}).setdefault(name, []).append(value)

    def _bind_target(self, target, value, stmt):
        owner = self.parents.get(id(stmt))
        if isinstance(target, ast.Name):
            if isinstance(owner, ast.ClassDef):
                self.attrs.setdefault(id(owner), {}).setdefault(target.id, []).append(value)
                self.fields.setdefault(id(owner), set()).add(target.id)
            else:
                self._bind(self.scope_of(stmt), target.id, value)
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
            cls = self.class_of(stmt)
            if cls is not None and self._is_receiver(target.value):
                self.attrs.setdefault(id(cls), {}).setdefault(target.attr, []).append(value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for i, elt in enumerate(target.elts):
                # `c, h = nn.LSTMCell.initialize_carry(...)`: each part is a carry part.
                self._bind_target(elt, ("part", i, value) if value is not _UNKNOWN else value, stmt)

    def _bind_loop(self, target, iterated, stmt):
        """``for x in xs`` binds ``x`` to an element of ``xs``; ``for a, b in zip(xs, ys)`` binds
        ``b`` to an element of ``ys`` (and ``enumerate`` likewise), so that a cell taken from a
        list built in ``setup`` keeps its kind."""
        if isinstance(target, ast.Name) or (
            isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
        ):
            self._bind_target(target, (ELEMENT, None, iterated), stmt)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for i, elt in enumerate(target.elts):
                if isinstance(elt, ast.Starred):
                    self._bind_target(elt.value, _UNKNOWN, stmt)
                else:
                    self._bind_loop_part(elt, i, iterated, stmt)
        else:
            self._bind_target(target, _UNKNOWN, stmt)

    def _bind_loop_part(self, target, i, iterated, stmt):
        if isinstance(target, (ast.Tuple, ast.List)):  # for i, (a, b) in ...: not followed
            self._bind_target(target, _UNKNOWN, stmt)
        else:
            self._bind_target(target, (ELEMENT, i, iterated), stmt)

    def _collect(self, node):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self._bind_target(target, node.value, node)
        elif isinstance(node, ast.AnnAssign):
            self._bind_target(node.target, node.value if node.value else _UNKNOWN, node)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            self._bind_loop(node.target, node.iter, node)
        elif isinstance(node, ast.AugAssign):
            self._bind_target(node.target, _UNKNOWN, node)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    self._bind_target(item.optional_vars, _UNKNOWN, node)
        elif isinstance(node, ast.NamedExpr):
            self._bind(self.scope_of(node), node.target.id, node.value)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            every = args.posonlyargs + args.args + args.kwonlyargs
            every += [a for a in (args.vararg, args.kwarg) if a is not None]
            self.params[id(node)] = {a.arg for a in every}
            owner = self.parents.get(id(node))
            if isinstance(owner, ast.ClassDef) and not isinstance(node, ast.Lambda):
                self.fields.setdefault(id(owner), set()).add(node.name)
                values = [
                    n.value
                    for n in ast.walk(node)
                    if isinstance(n, ast.Return) and n.value is not None
                ]
                self.returns.setdefault(id(owner), {})[node.name] = values
                if any(getattr(d, "id", None) == "property" for d in node.decorator_list):
                    self.properties.setdefault(id(owner), set()).add(node.name)

    def _is_receiver(self, name: ast.Name) -> bool:
        """True when `name` is the first parameter of the method it is used in."""
        scope = self.scope_of(name)
        if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        decorators = {getattr(d, "id", None) for d in scope.decorator_list}
        if "staticmethod" in decorators:
            return False
        first = (scope.args.posonlyargs + scope.args.args)[:1]
        return bool(first) and first[0].arg == name.id

    # ------------------------------------------------------------------ resolving

    def values_of(self, name: ast.Name):
        """The values bound to `name` in the nearest enclosing scope that binds it, or None
        when it is a parameter there or bound nowhere in this unit."""
        return self.lookup(name.id, self.scope_of(name))

    def lookup(self, name: str, scope):
        """The values bound to `name` as seen from `scope` (see values_of)."""
        while scope is not None:
            if name in self.params.get(id(scope), ()):
                return None
            found = self.assigned.get(id(scope), {}).get(name)
            if found:
                return found
            scope = self.scope_of(scope) if not isinstance(scope, ast.Module) else None
        return None

    def is_param(self, name: ast.Name) -> bool:
        scope = self.scope_of(name)
        while scope is not None and not isinstance(scope, ast.Module):
            if name.id in self.params.get(id(scope), ()):
                return True
            if name.id in self.assigned.get(id(scope), {}):
                return False
            scope = self.scope_of(scope)
        return False

    def self_attr(self, node):
        """(class, attribute) for ``self.x`` inside a method of a class in this unit."""
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and self._is_receiver(node.value)
        ):
            cls = self.class_of(node)
            if cls is not None:
                return cls, node.attr
        return None

    def kind(self, node, depth: int = 0) -> Kind | None:
        if node is None or depth > 12:
            return None
        if isinstance(node, tuple) and node[0] == "part":  # a part of an unpacked value
            inner = self.kind(node[2], depth + 1)
            return inner if inner is not None and inner.tag == CARRY else None
        if isinstance(node, tuple) and node[0] == ELEMENT:  # bound by a for loop
            return self._loop_kind(node[2], node[1], depth)
        if node is _UNKNOWN:
            return None
        found = self.names.cell_class(node) if isinstance(node, ast.expr) else None
        if found:
            return Kind(CLASS, *found, node=node)
        if isinstance(node, ast.Call):
            return self._call_kind(node, depth)
        if isinstance(node, ast.Name):
            values = self.values_of(node)
            if values is None:
                if node.id in self.names.scanned and not self.is_param(node):
                    family, cell = self.names.scanned[node.id]
                    return Kind(SCAN, family, cell, node=self.names.scan_calls[node.id])
                return None
            return self._one(values, depth, "variable")
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Slice):
            return self.element_kind(node.value, depth + 1)  # self.cells[i]
        if isinstance(node, ast.Attribute):
            owner = self.self_attr(node)
            if owner is not None:
                cls, attr = owner
                values = self.attrs.get(id(cls), {}).get(attr)
                via = "field" if attr in self.fields.get(id(cls), ()) else "attribute"
                if not values and attr in self.properties.get(id(cls), ()):
                    # a @property that builds the cell: what it returns
                    values, via = self.returns[id(cls)][attr], "helper"
                return self._one(values, depth, via) if values else None
            if node.attr == "cell":
                rnn = self.kind(node.value, depth + 1)
                if rnn is not None and rnn.tag == RNN:
                    cell = rnn.node.args[0] if rnn.node.args else None
                    for kw in rnn.node.keywords:
                        if kw.arg == "cell":
                            cell = kw.value
                    return self.kind(cell, depth + 1)
        return None

    def _loop_kind(self, iterated, part, depth) -> Kind | None:
        """The kind of what a for loop over `iterated` binds (part `part` of each element,
        for ``zip`` and ``enumerate``; the whole element when `part` is None)."""
        if part is None:
            return self.element_kind(iterated, depth + 1)
        if isinstance(iterated, ast.Call) and not iterated.keywords:
            func = getattr(iterated.func, "id", None)
            args = iterated.args
            if any(isinstance(a, ast.Starred) for a in args):
                return None
            if func == "zip" and part < len(args):
                return self.element_kind(args[part], depth + 1)
            if func == "enumerate" and part == 1 and args:
                return self.element_kind(args[0], depth + 1)
        return None

    def element_kind(self, node, depth: int = 0) -> Kind | None:
        """The kind every element of the container `node` holds: a list, tuple or
        comprehension of cells, ``[cell] * n``, ``list(...)`` of one, or a name or ``self.x``
        bound to one (``self.lstm = [nn.ConvLSTM(...) for _ in range(n)]`` in ``setup``)."""
        if node is None or depth > 12:
            return None
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            if not node.elts or any(isinstance(e, ast.Starred) for e in node.elts):
                return None
            return self._one(node.elts, depth, "element")
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            return self.kind(node.elt, depth + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            for side in (node.left, node.right):
                if isinstance(side, (ast.List, ast.Tuple)):
                    return self.element_kind(side, depth + 1)
            return None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
            return self.element_kind(node.value, depth + 1)  # cells[1:]
        if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
            if getattr(node.func, "id", None) in ("list", "tuple", "reversed", "sorted"):
                return self.element_kind(node.args[0], depth + 1)
            return None
        values = None
        if isinstance(node, ast.Name):
            values = self.values_of(node)
        elif isinstance(node, ast.Attribute):
            owner = self.self_attr(node)
            if owner is not None:
                values = self.attrs.get(id(owner[0]), {}).get(owner[1])
        if not values or any(not isinstance(v, ast.expr) for v in values):
            return None
        kinds = [self.element_kind(v, depth + 1) for v in values]
        if any(k is None for k in kinds) or len(set(kinds)) != 1:
            return None
        return kinds[-1]

    def _one(self, values, depth, via) -> Kind | None:
        kinds = [self.kind(v, depth + 1) for v in values]
        if not kinds or any(k is None for k in kinds) or len(set(kinds)) != 1:
            return None
        kind = kinds[-1]
        if kind.tag in (CLASS, SCAN) and kind.via is None:
            kind = dataclasses.replace(kind, via=via)
        return kind

    def _call_kind(self, call: ast.Call, depth) -> Kind | None:
        qual = self.names.qualname(call.func)
        if qual in _SCANS and call.args:
            inner = self.kind(call.args[0], depth + 1)
            if inner is not None and inner.tag == CLASS:
                return Kind(SCAN, inner.family, inner.cell, node=call, via=inner.via)
            return None
        if self.names.is_rnn(call.func):
            return Kind(RNN, self.names.is_rnn(call.func), "RNN", node=call)
        if isinstance(call.func, ast.Attribute) and call.func.attr == "initialize_carry":
            owner = self.kind(call.func.value, depth + 1)
            if owner is not None and owner.tag in (CLASS, SCAN, INSTANCE):
                return Kind(CARRY, owner.family, owner.cell, node=call)
            return None
        owner = self.self_attr(call.func)
        if owner is not None and owner[1] in self.returns.get(id(owner[0]), {}):
            # self.helper(): what the helper returns
            values = self.returns[id(owner[0])][owner[1]]
            return self._one(values, depth, "helper") if values else None
        func = self.kind(call.func, depth + 1)
        if func is not None and func.tag in (CLASS, SCAN):
            return Kind(INSTANCE, func.family, func.cell, node=call, scanned=func.tag == SCAN)
        return None

    def loads(self, target, value):
        """The places that read what ``target = value`` stored: a local name in its scope
        (where that assignment is its only one), or ``self.x`` in the methods of its class."""
        if isinstance(target, ast.Name):
            for node in ast.walk(self.scope_of(target)):
                if (
                    isinstance(node, ast.Name)
                    and node.id == target.id
                    and isinstance(node.ctx, ast.Load)
                ):
                    values = self.values_of(node)
                    if values and len(values) == 1 and values[0] is value:
                        yield node
            return
        owner = self.self_attr(target)
        if owner is None:
            return
        cls, attr = owner
        for node in ast.walk(cls):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Load)
                and self.self_attr(node) == (cls, attr)
            ):
                yield node
