"""The xir exception hierarchy: every error a malformed network can cause.

Each error carries the file, op id and field at fault (where known) and says them in its message,
so a user can go straight to the broken spot of a json/raw pair.
"""

from __future__ import annotations


class XirError(Exception):
    """Root of every error raised by xir."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        op_id: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.op_id = op_id
        self.field = field
        where = []
        if file is not None:
            where.append(str(file))
        if op_id is not None:
            where.append(f"op {op_id}")
        if field is not None:
            where.append(f"field '{field}'")
        super().__init__(f"{': '.join(where)}: {message}" if where else message)

    def located(self, *, file: str | None = None, op_id: int | None = None) -> XirError:
        """Return a copy of this error with the missing location parts filled in."""
        err = type(self).__new__(type(self))
        XirError.__init__(
            err,
            self.message,
            file=self.file if self.file is not None else file,
            op_id=self.op_id if self.op_id is not None else op_id,
            field=self.field,
        )
        for key, val in self.__dict__.items():
            if key not in ("message", "file", "op_id", "field"):
                setattr(err, key, val)
        return err


class NetworkFormatError(XirError, ValueError):
    """A network file (json) is malformed: syntax, structure or semantics."""


class JsonSyntaxError(NetworkFormatError):
    """The json text does not parse; `line`/`column`/`position` say where."""


class UnknownTypeKeyError(NetworkFormatError):
    """A `_type_key` names no registered xir class."""


class MissingFieldError(NetworkFormatError):
    """A required field is absent."""


class FieldTypeError(NetworkFormatError):
    """A field has the wrong type or an invalid value."""


class DanglingReferenceError(NetworkFormatError):
    """A value is consumed but never produced, or an id points nowhere."""


class DuplicateIdError(NetworkFormatError):
    """Two ops share an op_id, or two values a v_id."""


class CycleError(NetworkFormatError):
    """The ops are not in a valid execution (topological) order."""


class ShapeMismatchError(NetworkFormatError):
    """An op's declared output shape disagrees with what its inputs imply."""


class NetworkFileNotFoundError(XirError, FileNotFoundError):
    """A network json or raw file does not exist or cannot be read."""


class NetworkWriteError(XirError, OSError):
    """A network's json or raw file cannot be written (missing folder, full disk, no
    permission); the files already there are left as they were."""


class RawFileError(XirError, ValueError):
    """A .raw parameter file is unusable."""


class RawMagicError(RawFileError):
    """The .raw file does not start with the Icraft magic."""


class RawTruncatedError(RawFileError):
    """The .raw file is shorter than its header or the json's params_bytes say."""


class RawSizeError(RawFileError):
    """The .raw file is larger than params_bytes, or a parameter's size disagrees with its type."""


class RawChecksumError(RawFileError):
    """The md5 of the .raw file differs from the json's params_md5."""


class OpNotFoundError(XirError, LookupError):
    """No op with the requested id (or position) in this network or view."""


class ValueNotFoundError(XirError, LookupError):
    """No value with the requested v_id in this network or view."""


class GraphEditError(XirError, ValueError):
    """An edit (add/insert/remove/replace) would break the network."""


class OpAttributeError(XirError, AttributeError):
    """An op has no attribute of that name (kept distinct from Python's own)."""


class MissingDependencyError(XirError, ImportError):
    """An optional dependency of xir (such as onnx) is missing."""


class OnnxImportError(NetworkFormatError):
    """An ONNX model cannot be imported into an xir network."""


class OnnxModelError(OnnxImportError):
    """The ONNX file is corrupt, truncated or not an ONNX model at all."""


class UnsupportedOnnxOpError(OnnxImportError):
    """ONNX nodes with no xir equivalent; `nodes` lists every one as (name, op_type, reason)."""

    def __init__(self, message: str, *, nodes: list[tuple[str, str, str]] | None = None,
                 **kw) -> None:
        super().__init__(message, **kw)
        self.nodes = list(nodes or [])


class DynamicShapeError(OnnxImportError):
    """A graph input has symbolic or unknown dimensions and `input_shapes` does not fix them."""


class CalibrationError(XirError, ValueError):
    """A calibration sample set is unusable: empty, unreadable, or a sample whose shape or dtype
    does not fit the network input; the message names the file (if any) and the input."""


class HardwareLimitError(XirError, ValueError):
    """A compiled network cannot fit its target hardware: the message names the limit, what
    needs it, and what to change (raised by the compile, before any deployment)."""


class QuantizationError(XirError, ValueError):
    """A network cannot be quantized as asked (e.g. an integer parameter out of its range)."""
