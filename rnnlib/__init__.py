"""rnnlib: recurrent networks in pure JAX, number for number the same as flax.linen.

The cells (``LSTMCell``, ``OptimizedLSTMCell``, ``GRUCell``, ``MGUCell``,
``SimpleCell``, ``ConvLSTMCell``, and the linear ``MinGRUCell``, ``MinLSTMCell`` and
``RGLRUCell``, which ``RNN`` also runs as one associative scan) follow FLIP 3099: each
knows its ``features``, builds its own carry with ``initialize_carry(rng, input_shape)``
and reports ``num_feature_axes``, which is all ``RNN`` needs to find the time axis of
any input. ``Bidirectional`` composes two ``RNN``s; ``flip_sequences`` reverses padded
sequences. Variables are plain dicts laid out exactly like flax.linen's.
"""

from rnnlib.axis_roles import Layout, layout
from rnnlib.bidirectional import Bidirectional
from rnnlib.cell_base import RNNCellBase
from rnnlib.conv_lstm import ConvLSTMCell
from rnnlib.dropout import Dropout
from rnnlib.flip import flip_sequences
from rnnlib.gru import GRUCell, MGUCell
from rnnlib.linear_rnn import LinearCellBase
from rnnlib.lstm import LSTMCell, OptimizedLSTMCell
from rnnlib.min_rnn import MinGRUCell, MinLSTMCell
from rnnlib.plan import Plan
from rnnlib.recurrent_dropout import RecurrentDropoutCell
from rnnlib.rglru import RGLRUCell
from rnnlib.rnn import RNN
from rnnlib.simple import SimpleCell
from rnnlib.stacked import StackedRNN

__version__ = "0.1.0"

__all__ = [
    "RNNCellBase",
    "LSTMCell",
    "OptimizedLSTMCell",
    "GRUCell",
    "MGUCell",
    "SimpleCell",
    "ConvLSTMCell",
    "LinearCellBase",
    "MinGRUCell",
    "MinLSTMCell",
    "RGLRUCell",
    "RNN",
    "Plan",
    "Bidirectional",
    "StackedRNN",
    "Dropout",
    "RecurrentDropoutCell",
    "flip_sequences",
    "layout",
    "Layout",
]
