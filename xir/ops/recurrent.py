"""Recurrent ops: the LSTM, GRU and RNN cells over a sequence."""

from __future__ import annotations
