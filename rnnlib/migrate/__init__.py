"""Find, and where it is safe fix, code written for Flax 0.6's recurrent API.

Flax 0.7 changed how recurrent cells are configured. Up to Flax 0.6.11 a cell such as
``nn.LSTMCell()`` took no ``features``: its width came from the carry, which a *static*
method built from the class, ``nn.LSTMCell.initialize_carry(rng, batch_dims, size)``, and
``nn.RNN(cell, cell_size)`` needed the size again. In the current API the cell is configured
with ``features``, and ``initialize_carry`` is an instance method that reads the batch dims from
the shape of one input step: ``nn.LSTMCell(features=64).initialize_carry(rng, (16, 8))``.

``python -m rnnlib.migrate`` reads ``.py`` files and Jupyter notebooks (``.ipynb``, the code
cells), parses them with Python's ``ast`` module (never with regular expressions), and reports
every use of the old API it finds, by rule. Each rule has a severity: ``error`` (breaks under
current Flax), ``review`` (the checker cannot prove it safe, and says why) or ``advice``
(breaks nothing; fails a run only with ``--strict``). The rules (from
``rnnlib.migrate.rules.RULES``, the one table that this text, ``--help`` and the migration
chapter are made from):

{rules}

Names are resolved through the file's imports (``import flax.linen as nn``,
``from flax import linen as nn``, ``from flax.linen import LSTMCell``, ``from rnnlib import
legacy``); in a notebook the imports of every code cell count. ``nn``, ``linen`` and ``legacy``
keep their usual meaning when the file never binds them. A name bound to something else
(``import torch.nn as nn``) is not Flax, and nothing is reported for it.

The names the rules follow further (a class in a dataclass field or on ``self``, an
``nn.scan`` returned by a helper, ``rnn.cell``) are resolved by ``rnnlib.migrate.resolve``.

Usage::

    python -m rnnlib.migrate PATH... [--format text|json] [--fix] [--strict]
    rnnlib-migrate PATH...          # the same, as a console script

Directories are searched recursively for ``*.py`` and ``*.ipynb`` (skipping hidden
directories, ``__pycache__``, ``site-packages``, ``node_modules`` and ``venv``, and following
symbolic links, each real directory once); a file named on the command line is always read, as
a notebook when it ends in ``.ipynb`` and as Python otherwise. A file reached twice (through a
link, a hard link, or named twice) is checked once. A FIFO, socket or device is reported and
never opened, so a run cannot block on one; whatever cannot be read or parsed (no permission,
a broken link, bad encoding, bad JSON, a notebook whose ``metadata`` is not an object, code
nested too deeply for Python's parser) is one error line, and the run goes on with the other
files (``rnnlib.migrate.files``).

Each finding is printed as ``path:line:col: CODE severity: message`` followed by a suggested rewrite in
the current API. Lines and columns count from 1 (columns in characters). In a notebook the
location is ``path:cellN:line:col``, where ``N`` counts every cell of the notebook from 1,
markdown cells included (so it is ``cells[N-1]`` in the JSON), and ``line`` counts within
that cell. Line magics and shell escapes (``%time``, ``!pip``) are read as comments.

``--format json`` prints one object: ``{"findings": [...], "errors": [...],
"fixed_files": [...], "fully_fixed_files": [...]}``. Each finding has ``path``, ``cell`` (an
int, or null outside notebooks), ``line``, ``col``, ``code``, ``message``, ``suggestion``,
``severity``, ``fixable``, ``reason`` (why it is not fixable, or null) and ``fixed``. Each error has
``path``, ``cell``, ``line``, ``col`` (null where they do not apply) and ``message``.

``--fix`` rewrites, in place, the cases whose meaning is unambiguous:

* ``X.initialize_carry(rng, batch_dims, size[, init_fn])`` for ``X`` a Flax ``LSTMCell``,
  ``OptimizedLSTMCell`` or ``GRUCell`` becomes
  ``X(features=size[, carry_init=init_fn], parent=None).initialize_carry(rng, batch_dims + (1,))``.
  ``parent=None`` matters when the call runs inside a ``@nn.compact`` method (as a static
  ``initialize_carry`` called from ``__call__`` does): without it linen would make the new cell
  a child of the enclosing module, where it takes an auto-name such as ``LSTMCell_0`` and
  shifts the auto-names of the cells built after it, so an old checkpoint would no longer
  match. Outside a module it changes nothing.
  The trailing ``1`` stands for the number of input channels, which the current API wants in the
  input shape but which the carry of these three cells does not depend on, so any positive
  number gives the same carry; the fixer writes a comment saying so above the statement.
  The keys are used as before: the LSTMs split ``rng`` into one key for ``c`` and one for
  ``h``, in 0.6.11 and now, and the GRU uses it whole, in both. ``init_fn`` is carried over
  only when it is a ``flax``/``jax`` initializer, because the current API calls it as
  ``carry_init(key, shape, dtype)``, with one argument more than 0.6 did.
* ``RNN(Cell(), cell_size=n)`` becomes ``RNN(Cell(features=n))`` for the three cells above,
  and ``cell_size`` is dropped when the cell already has a matching ``features`` (when both are
  int literals that differ, the finding says so and the fixer does not choose between them).
* A cell or scanned cell class built without ``features`` is given the width written in the
  file or read from the carry it is called with (MIG003, see
  ``rnnlib.migrate.rule_features``); ``cell.initialize_carry(rng, batch_dims, size)`` on
  such an instance loses ``size`` in the same edit (MIG007).
* ``nn.ConvLSTM`` is renamed ``nn.ConvLSTMCell`` (MIG005), and an ``nn.RNNCellBase`` subclass
  whose inputs are plain vectors gets ``num_feature_axes`` (MIG006).

It does not fix ``ConvLSTMCell.initialize_carry``, because the current call needs the cell's
``kernel_size`` and takes the carry's signal dims from the input, neither of which the old
call shows (so a wrong ``size`` that 0.6 accepted, as in FLIP 3099, surfaces here), nor a
cell whose width it cannot read, nor ``rnnlib.legacy`` code (the old API on
purpose; its suggestions name rnnlib's own cells, such as ``rnnlib.LSTMCell``), nor the
``nn.scan`` wrapper (a structural change). Every finding it
leaves has a reason. The fixer never touches a file it cannot parse, leaves every byte outside
the edited spans as it was, re-parses its result before writing, and in a notebook edits only
code cells and writes the JSON back in the layout it was read in (a notebook whose layout it
cannot reproduce byte for byte is left alone, with that reason).

``--fix`` writes to the file a symbolic link points to and leaves the link a link. It refuses a
read-only file, or one that changed while it was checked, and says so. It writes through a
temporary file of its own (a fresh hidden name from ``tempfile.mkstemp``, beside the target,
never a name of the user's), gives it the file's mode, owner, group and extended attributes,
and moves it over the file in one step; a file with several hard links, or whose owner or
attributes the temporary file cannot take on, is overwritten in place instead, so that it keeps
them. A file it cannot write (in a read-only directory, on a full disk) is left as it was and
reported.

Exit status: ``0`` when nothing is left that breaks under current Flax or needs review
(advice is left only without ``--strict``), ``1`` when something is, ``2`` when some input
could not be read or parsed (a missing path, a syntax error, a notebook that is not valid JSON,
a FIFO) or ``--fix`` could not write a file; each is one line on stderr (``errors`` in JSON),
and the other files are still checked.

{measured} In rnnlib's source repository, ``tests/migrate_corpus_report.py`` and
``tests/migrate_real_corpus_report.py`` measure these numbers.

The code: ``rules`` (the table), one ``rule_*`` module per rule,
``checker`` (runs them), ``fixer`` (``--fix``), ``files`` (reading and writing files safely),
``notebooks`` (parsing files and notebooks), ``cli``.
"""

from __future__ import annotations

from rnnlib.migrate.cli import MEASURED, main
from rnnlib.migrate.findings import Error, Finding
from rnnlib.migrate.rules import RULES, rules_text

__doc__ = __doc__.replace("{rules}", rules_text()).replace("{measured}", MEASURED)

__all__ = ["RULES", "Error", "Finding", "main"]
