"""PyTorch's LSTM and GRU, run for tests/parity/test_torch_weights.py in .venv-torch.

Usage: ``python torch_reference.py OUT.npz CASES.json [STATES.npz]``. ``CASES.json`` holds a
list of cases, each a dict with ``name``, ``kind`` (``"LSTM"`` or ``"GRU"``), ``input_size``,
``hidden_size``, ``num_layers``, ``bidirectional``, ``batch_first``, ``bias``, ``proj_size``,
``batch``, ``time`` and ``seed``. For each case the script builds the module from
``torch.manual_seed(seed)`` (PyTorch's own initialisation, biases included), draws an input
laid out as the module reads it and stores, under ``NAME/``: ``state/KEY`` for each entry of the
state dict, ``x``, the outputs ``y`` and the final ``h`` (and ``c`` for the LSTM). With
``STATES.npz`` the module's state dict is first replaced, strictly, by the arrays stored there
under ``NAME/state/``, and the stored input is the one in that file under ``NAME/x``.
"""

import json
import sys

import numpy as np
import torch


def build(case):
    torch.manual_seed(case["seed"])
    module = getattr(torch.nn, case["kind"])
    options = dict(
        num_layers=case["num_layers"],
        bidirectional=case["bidirectional"],
        batch_first=case["batch_first"],
        bias=case["bias"],
    )
    if case["kind"] == "LSTM":
        options["proj_size"] = case["proj_size"]
    return module(case["input_size"], case["hidden_size"], **options)


def run(case, states):
    module = build(case)
    name = case["name"]
    if states is None:
        shape = (case["batch"], case["time"], case["input_size"])
        if not case["batch_first"]:
            shape = (case["time"], case["batch"], case["input_size"])
        x = torch.randn(shape)
    else:
        prefix = f"{name}/state/"
        state = {
            k[len(prefix) :]: torch.from_numpy(v) for k, v in states.items() if k.startswith(prefix)
        }
        module.load_state_dict(state, strict=True)
        x = torch.from_numpy(states[f"{name}/x"])
    with torch.no_grad():
        y, carry = module(x)
    out = {f"{name}/state/{k}": v.numpy() for k, v in module.state_dict().items()}
    out[f"{name}/x"] = x.numpy()
    out[f"{name}/y"] = y.numpy()
    if case["kind"] == "LSTM":
        out[f"{name}/h"], out[f"{name}/c"] = carry[0].numpy(), carry[1].numpy()
    else:
        out[f"{name}/h"] = carry.numpy()
    return out


def main(out, cases, states=None):
    torch.set_num_threads(1)
    with open(cases) as f:
        cases = json.load(f)
    if states is not None:
        with np.load(states) as data:
            states = {k: data[k] for k in data.files}
    result = {}
    for case in cases:
        result.update(run(case, states))
    np.savez(out, **result)


if __name__ == "__main__":
    main(*sys.argv[1:])
