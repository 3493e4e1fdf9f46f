"""Tables as users have them: DataFrames with numeric, boolean, categorical and string columns and
missing values, turned into the two numeric matrices BuDRO needs.

:class:`TableEncoder` is fitted on the training rows only and records the table's schema: the
column names, the kind of every column and, for categorical columns, the training categories in
sorted order.  It then produces

* the **booster matrix** (:meth:`TableEncoder.booster_matrix`): numeric columns as they are
  (missing values stay NaN when the booster handles them, else the training median), booleans as
  0/1, categorical columns as integer codes of the training categories (missing or unseen: NaN)
  when the booster splits on categories natively, else one-hot (missing or unseen: all zeros);
* the **metric matrix** (:meth:`TableEncoder.metric_matrix`): the fair metric's numeric embedding,
  with no missing values: numeric and boolean columns imputed with the training median and
  standardised (training mean and standard deviation), categorical columns imputed with the most
  frequent training category and one-hot encoded (an unseen category: all zeros).

In both matrices the numeric and boolean columns come first (in table order), then the
categorical ones (in table order); :attr:`TableEncoder.booster_feature_names_` and
:attr:`TableEncoder.metric_feature_names_` name every column (``"race=White"`` for one-hot).

Inputs: pandas, polars and other DataFrames that narwhals reads (pyarrow tables included), and
2-D numpy arrays (columns are then named by position).  Column kinds, from the column's dtype:

======================================================  ============
dtype                                                   kind
======================================================  ============
integers, floats, decimals                              numeric
boolean (or a pandas ``object`` column of True/False)   boolean
string, categorical, enum, other ``object`` columns     categorical
======================================================  ============

Categories are compared as strings (a pandas categorical of integers 1, 2 has the categories
"1", "2") and kept in sorted order, so the codes do not depend on the order in which a
DataFrame library lists them.  Dates, durations, lists and structs are refused with an error that
names the column.  Everything is computed by scikit-learn's ``SimpleImputer``,
``StandardScaler``, ``OneHotEncoder`` and ``OrdinalEncoder``; :meth:`TableEncoder.to_state`
stores them with skops, and :meth:`TableEncoder.from_state` loads only the scikit-learn and
numpy types listed in :data:`TRUSTED_TYPES` (nothing at load runs code).
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any, Iterable, Sequence

import numpy as np

from budro.exceptions import ValidationError

__all__ = ["TableEncoder", "UnseenCategoryWarning", "is_table", "table_needs_encoding", "KINDS",
           "DEFAULT_MAX_CATEGORIES", "TRUSTED_TYPES"]

#: The kinds of column a :class:`TableEncoder` knows.
KINDS = ("numeric", "boolean", "categorical")

#: Default limit on the distinct values of one categorical column.  A column with more is almost
#: always an identifier (a name, an id, a free-text field) that cannot generalise and would blow
#: up the one-hot embedding; raise ``max_categories`` if it is a real category.
DEFAULT_MAX_CATEGORIES = 1000

#: Types a stored encoder may contain; :meth:`TableEncoder.from_state` refuses any other.
TRUSTED_TYPES = (
    "builtins.NoneType",
    "builtins.bool",
    "builtins.dict",
    "builtins.float",
    "builtins.int",
    "builtins.list",
    "builtins.str",
    "builtins.tuple",
    "numpy.dtype",
    "numpy.float64",
    "numpy.int64",
    "numpy.ndarray",
    "numpy.object_",
    "sklearn.pipeline.Pipeline",
    "sklearn.impute._base.SimpleImputer",
    "sklearn.preprocessing._data.StandardScaler",
    "sklearn.preprocessing._encoders.OneHotEncoder",
    "sklearn.preprocessing._encoders.OrdinalEncoder",
)

_STATE_FORMAT = "budro.TableEncoder"
_STATE_VERSION = 1
_BLOB = "table_transformers.skops"
#: Code of a category not seen in training (the one-hot encoders, knowing only 0..k-1, give it zeros).
_UNSEEN = -1


class UnseenCategoryWarning(UserWarning):
    """A categorical column holds values that were not in the training rows."""


# -- input inspection ----------------------------------------------------------------------
def _narwhals_frame(X: Any):
    """``X`` as an eager narwhals DataFrame, or None when it is not a DataFrame narwhals reads."""
    import narwhals as nw

    if isinstance(X, np.ndarray):
        return None
    try:
        frame = nw.from_native(X, eager_only=True, pass_through=True)
    except nw.exceptions.DuplicateError:
        # budro finds columns by name (protected attributes, the columns a saved model predicts
        # on): a table whose names repeat cannot be read as one, nor quietly as a bare array
        raise ValidationError(f"X has duplicate column names ({_repeated_names(X)}); give each column its own "
                              "name, or pass a numpy array") from None
    except Exception:  # narwhals raises library-specific errors for odd objects
        return None
    return frame if isinstance(frame, nw.DataFrame) else None


def _repeated_names(X: Any) -> str:
    """The column names of ``X`` that occur more than once, with their counts."""
    from collections import Counter

    names = getattr(X, "column_names", None)  # pyarrow (whose .columns are the arrays)
    if names is None:
        names = getattr(X, "columns", ())
    counts = Counter(str(name) for name in names)
    return ", ".join(f"{name!r} {k} times" for name, k in counts.items() if k > 1) or "names repeated"


def is_table(X: Any) -> bool:
    """True when ``X`` is a DataFrame (pandas, polars, pyarrow table, ...) that narwhals reads."""
    return _narwhals_frame(X) is not None


def table_needs_encoding(X: Any) -> bool:
    """True when ``X`` cannot go to the boosters and the fair metric as a plain float matrix: a
    DataFrame with a non-numeric (string, categorical, object, date, ...) column or a missing
    value, or a numpy array of non-numeric dtype or with NaN.  Booleans count as numeric."""
    frame = _narwhals_frame(X)
    if frame is None:
        import scipy.sparse

        if scipy.sparse.issparse(X):
            return False
        try:
            arr = np.asarray(X)
        except Exception:
            return False  # let the caller's own validation say what is wrong
        if arr.dtype.kind in "biuf":
            return arr.dtype.kind == "f" and bool(np.isnan(arr).any())
        if arr.dtype.kind in "US":
            return True
        if arr.dtype.kind == "O":
            return any(v is None or isinstance(v, str) or (isinstance(v, float) and v != v) for v in arr.ravel())
        return False
    schema = frame.schema
    if not all(dtype.is_numeric() or _is_boolean(dtype) for dtype in schema.values()):
        return True
    for name, dtype in schema.items():
        # Each column as numpy (a view for numpy-backed frames): an integer or boolean array holds
        # no missing value, a float one holds them as NaN (nulls of polars and pyarrow columns
        # included); other results (pandas' nullable dtypes) are asked through narwhals.  German's
        # 61 columns: under a millisecond, against 30 ms with narwhals' expressions on each.
        series = frame.get_column(name)
        values = series.to_numpy()
        if values.dtype.kind in "biu":
            continue
        if values.dtype.kind == "f" and values.dtype.itemsize >= 4:
            if np.isnan(values).any():
                return True
            continue
        if _missing_mask(series, dtype).any():
            return True
    return False


def _is_boolean(dtype: Any) -> bool:
    import narwhals as nw

    return dtype == nw.Boolean


def _is_categorical(dtype: Any) -> bool:
    import narwhals as nw

    return dtype in (nw.String, nw.Categorical, nw.Enum, nw.Object)


def _missing_mask(series: Any, dtype: Any) -> np.ndarray:
    import narwhals as nw

    mask = series.is_null()
    if dtype in (nw.Float32, nw.Float64):
        mask = mask | series.is_nan().fill_null(True)
    return np.asarray(mask.to_numpy(), dtype=bool)


class _Column:
    """One column of the input: its name, kind and values (float64 or object with NaN missing)."""

    __slots__ = ("name", "kind", "values", "missing", "dtype")

    def __init__(self, name: str, kind: str, values: np.ndarray, missing: np.ndarray, dtype: str):
        self.name, self.kind, self.values, self.missing, self.dtype = name, kind, values, missing, dtype


def _object_kind(values: np.ndarray, missing: np.ndarray) -> str:
    present = values[~missing]
    if present.size and all(isinstance(v, (bool, np.bool_)) for v in present):
        return "boolean"
    if present.size and all(isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) for v in present):
        return "numeric"
    return "categorical"


def _as_float(values: np.ndarray, missing: np.ndarray) -> np.ndarray:
    out = np.full(values.shape[0], np.nan)
    out[~missing] = values[~missing].astype(np.float64)
    return out


def _as_strings(values: np.ndarray, missing: np.ndarray, *, convert: bool = True) -> np.ndarray:
    """Object array of the values as strings, NaN where missing (``convert=False``: they are
    strings already)."""
    out = np.array(values, dtype=object, copy=True)
    present = ~missing
    if convert:
        out[present] = [v if isinstance(v, str) else str(v) for v in out[present]]
    out[missing] = np.nan
    return out


def _read_columns(X: Any, what: str) -> tuple[list[_Column], bool]:
    """The columns of ``X``; the flag says whether they have names of their own."""
    import narwhals as nw

    frame = _narwhals_frame(X)
    if frame is None:
        return _read_array(X, what), False
    # As scikit-learn: only string column names count as names; others are positions.
    named = all(isinstance(name, str) for name in frame.columns)
    cols = []
    for j, (name, dtype) in enumerate(frame.schema.items()):
        series = frame.get_column(name)
        name = name if named else str(j)
        missing = _missing_mask(series, dtype)
        if dtype.is_numeric():
            values = series.cast(nw.Float64).to_numpy().astype(np.float64, copy=False)
            values = np.where(missing, np.nan, values)
            kind = "numeric"
        elif _is_boolean(dtype):
            values = _as_float(series.to_numpy().astype(object), missing)
            kind = "boolean"
        elif dtype == nw.Object:
            raw = np.asarray(series.to_numpy(), dtype=object)
            kind = _object_kind(raw, missing)
            values = _as_strings(raw, missing) if kind == "categorical" else _as_float(raw, missing)
        elif _is_categorical(dtype):
            raw = np.asarray(series.cast(nw.String).to_numpy(), dtype=object)
            values = _as_strings(raw, missing, convert=False)
            kind = "categorical"
        else:
            raise ValidationError(
                f"{what}: column {name!r} has dtype {dtype}, which budro cannot use; convert it to numbers "
                f"(e.g. days since a date) or to strings, or drop it"
            )
        cols.append(_Column(name, kind, values, missing, str(dtype)))
    _check_finite(cols, what)
    return cols, named


def _read_array(X: Any, what: str) -> list[_Column]:
    try:
        arr = np.asarray(X)
    except Exception as exc:
        raise ValidationError(f"{what} must be a DataFrame or a 2-D array, got {type(X).__name__}: {exc}") from None
    if arr.ndim != 2:
        raise ValidationError(f"{what} must be a DataFrame or a 2-D array (n_samples, n_features), got shape {arr.shape}")
    cols = []
    for j in range(arr.shape[1]):
        col = arr[:, j]
        if col.dtype.kind in "biuf":
            values = col.astype(np.float64)
            missing = np.isnan(values)
            kind = "boolean" if col.dtype.kind == "b" else "numeric"
        elif col.dtype.kind in "OUS":
            raw = col.astype(object)
            missing = np.array([v is None or (isinstance(v, float) and v != v) for v in raw], dtype=bool)
            kind = _object_kind(raw, missing)
            values = _as_strings(raw, missing) if kind == "categorical" else _as_float(raw, missing)
        else:
            raise ValidationError(f"{what}: column {j} has dtype {col.dtype}, which budro cannot use; convert it to numbers or strings")
        cols.append(_Column(str(j), kind, values, missing, str(col.dtype)))
    _check_finite(cols, what)
    return cols


def _check_finite(cols: list[_Column], what: str) -> None:
    for c in cols:
        if c.kind != "categorical" and np.isinf(c.values).any():
            raise ValidationError(
                f"{what}: column {c.name!r} holds infinite values (first in row {int(np.argmax(np.isinf(c.values)))}); "
                f"replace them by a number or by a missing value"
            )


# -- the encoder ---------------------------------------------------------------------------
class TableEncoder:
    """Schema and encodings of a training table (see the module docstring).

    Parameters
    ----------
    max_categories : int, default :data:`DEFAULT_MAX_CATEGORIES` (1000)
        A categorical column with more distinct training values is refused (it is almost always an
        identifier; drop it, or raise this limit if it really is a category).

    Attributes (after :meth:`fit`)
    ------------------------------
    columns_ : tuple of str
        The training columns (positions "0", "1", ... for an array).
    kinds_ : dict column -> "numeric" | "boolean" | "categorical"
    categories_ : dict column -> tuple of str
        Training categories of each categorical column, sorted.
    has_names_ : bool
        Whether the training input had column names (a DataFrame).
    protected_columns_ : tuple of str
    categorical_features_ : tuple of int
        Columns of :meth:`booster_matrix` that hold category codes (empty with one-hot).
    booster_feature_names_, metric_feature_names_ : tuple of str
    protected_metric_indices_ : tuple of int
        Columns of :meth:`metric_matrix` that belong to the protected columns: every one-hot
        column of a categorical one, the one column of a numeric or boolean one.
    """

    def __init__(self, max_categories: int = DEFAULT_MAX_CATEGORIES):
        self.max_categories = max_categories

    # -- fitting ---------------------------------------------------------------------------
    def fit(self, X: Any, *, protected: Sequence[str | int] = (), native_categorical: bool,
            native_missing: bool = True, categories: dict[str, Iterable[str]] | None = None) -> "TableEncoder":
        """Record the schema of the training table ``X`` and fit the encodings on its rows.

        Parameters
        ----------
        protected : column names or positions
            Raw columns of the protected attributes.
        native_categorical : bool
            True: categorical columns become one code column each for a booster that splits on
            categories (missing and unseen values NaN).  False: one-hot columns.
        native_missing : bool, default True
            True: missing numeric values reach the booster as NaN.  False: they are replaced by the
            training median (for a booster that refuses NaN).  Codes need NaN, so
            ``native_categorical`` requires ``native_missing``.
        categories : dict column -> strings, optional
            Categories of categorical columns seen on more rows than ``X`` (a distributed fit
            fits the encoder on a sample and counts the categories on every row): each such
            column's categories are these and those of ``X``, sorted.  The statistics (medians,
            means, most frequent categories) are those of ``X``.
        """
        from sklearn.impute import SimpleImputer
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder, StandardScaler

        if isinstance(self.max_categories, bool) or not isinstance(self.max_categories, numbers.Integral) or self.max_categories < 2:
            raise ValidationError(f"max_categories must be an integer >= 2, got {self.max_categories!r}")
        for name, flag in (("native_categorical", native_categorical), ("native_missing", native_missing)):
            if not isinstance(flag, (bool, np.bool_)):
                raise ValidationError(f"{name} must be True or False, got {flag!r}")
        if native_categorical and not native_missing:
            raise ValidationError("native_categorical=True needs native_missing=True (missing and unseen categories are NaN codes)")
        cols, named = _read_columns(X, "X")
        if not cols:
            raise ValidationError("X has no columns")
        n = cols[0].values.shape[0]
        if n < 1:
            raise ValidationError("X has no rows")
        names = [c.name for c in cols]
        if len(set(names)) != len(names):
            dup = next(c for c in names if names.count(c) > 1)
            raise ValidationError(f"X has the column {dup!r} twice")
        extra = {} if categories is None else dict(categories)
        kinds = {c.name: c.kind for c in cols}
        for name in extra:
            if kinds.get(name) != "categorical":
                raise ValidationError(f"categories: {name!r} is not a categorical column of X")
        found: dict[str, tuple[str, ...]] = {}
        for c in cols:
            if c.missing.all():
                raise ValidationError(
                    f"column {c.name!r} has no values (every row is missing); drop it before fitting"
                )
            if c.kind == "categorical":
                cats = sorted(set(c.values[~c.missing]) | {str(v) for v in extra.get(c.name, ())})
                if len(cats) > self.max_categories:
                    raise ValidationError(
                        f"column {c.name!r} has {len(cats)} distinct values (more than max_categories="
                        f"{self.max_categories}); it looks like an identifier or free text: drop it, or raise "
                        f"max_categories if it really is a category"
                    )
                found[c.name] = tuple(cats)
        categories = found
        self.columns_ = tuple(names)
        self.kinds_ = {c.name: c.kind for c in cols}
        self.dtypes_ = {c.name: c.dtype for c in cols}
        self.categories_ = categories
        self.has_names_ = bool(named)
        self.native_categorical_ = bool(native_categorical)
        self.native_missing_ = bool(native_missing)
        self.protected_columns_ = self._protected_columns(protected, cols)

        num, cat = self._blocks(cols)
        cat_lists = [list(categories[name]) for name in self._categorical_names()]
        transformers: dict[str, Any] = {}
        if self._numeric_names():
            transformers["metric_numeric"] = make_pipeline(SimpleImputer(strategy="median"), StandardScaler()).fit(num)
        if cat_lists:
            # Strings -> codes of the sorted training categories once (missing: NaN, unseen:
            # _UNSEEN); everything else works on the codes (numeric encoders, no object arrays).
            codes_encoder = OrdinalEncoder(
                categories=cat_lists, handle_unknown="use_encoded_value", unknown_value=_UNSEEN,
                encoded_missing_value=np.nan, dtype=np.float64,
            ).fit(cat)
            codes = _codes(codes_encoder, cat, [c for c in cols if c.kind == "categorical"])
            code_lists = [np.arange(len(c), dtype=np.float64) for c in cat_lists]
            transformers["codes"] = codes_encoder
            transformers["metric_categorical"] = make_pipeline(
                SimpleImputer(strategy="most_frequent"),
                OneHotEncoder(categories=code_lists, handle_unknown="ignore", sparse_output=False, dtype=np.float64),
            ).fit(codes)
            if not native_categorical:
                transformers["booster_onehot"] = OneHotEncoder(
                    categories=code_lists, handle_unknown="ignore", sparse_output=False, dtype=np.float64,
                ).fit(codes)
        self._transformers = transformers
        self._layout()
        return self

    def _protected_columns(self, protected: Any, cols: list[_Column]) -> tuple[str, ...]:
        if protected is None:
            return ()
        if isinstance(protected, (str, numbers.Integral)) or not isinstance(protected, Iterable):
            raise ValidationError(f"protected must be a list of column names or indices, got {protected!r}")
        out = []
        for p in protected:
            if isinstance(p, str):
                if p not in self.columns_:
                    raise ValidationError(
                        f"protected attribute {p!r} is not a column of X; the columns are: {', '.join(self.columns_)}"
                    )
                out.append(p)
            elif isinstance(p, numbers.Integral) and not isinstance(p, bool):
                d = len(self.columns_)
                if not -d <= p < d:
                    raise ValidationError(f"protected column index {p} is out of range for {d} columns")
                out.append(self.columns_[int(p) % d])
            else:
                raise ValidationError(f"protected must hold column names or indices, got {p!r}")
        if len(set(out)) != len(out):
            raise ValidationError(f"protected lists a column twice: {list(protected)!r}")
        by_name = {c.name: c for c in cols}
        for name in out:
            c = by_name[name]
            distinct = np.unique(c.values[~c.missing]) if c.kind != "categorical" else self.categories_[name]
            if len(distinct) < 2:
                raise ValidationError(
                    f"protected column {name!r} has a single value ({distinct[0]!r}) in the training rows: "
                    f"it cannot tell anyone apart; drop it from protected or train on rows where it varies"
                )
        return tuple(out)

    def _numeric_names(self) -> list[str]:
        return [c for c in self.columns_ if self.kinds_[c] != "categorical"]

    def _categorical_names(self) -> list[str]:
        return [c for c in self.columns_ if self.kinds_[c] == "categorical"]

    def _blocks(self, cols: list[_Column]) -> tuple[np.ndarray, np.ndarray]:
        n = cols[0].values.shape[0]
        num = [c.values for c in cols if c.kind != "categorical"]
        cat = [c.values for c in cols if c.kind == "categorical"]
        num_block = np.column_stack(num) if num else np.empty((n, 0))
        cat_block = np.empty((n, len(cat)), dtype=object)
        for j, v in enumerate(cat):
            cat_block[:, j] = v
        return num_block, cat_block

    def _layout(self) -> None:
        """Columns of both matrices: the numeric and boolean columns (in table order), then the
        categorical ones (in table order; one code column each, or their one-hot columns)."""
        numeric, categorical = self._numeric_names(), self._categorical_names()
        cats = self.categories_
        names = list(numeric)
        metric_names = list(numeric)
        protected_idx = [numeric.index(c) for c in numeric if c in self.protected_columns_]
        if self.native_categorical_:
            self.categorical_features_ = tuple(range(len(numeric), len(numeric) + len(categorical)))
            names.extend(categorical)
        else:
            self.categorical_features_ = ()
            names.extend(f"{name}={c}" for name in categorical for c in cats[name])
        for name in categorical:
            if name in self.protected_columns_:
                protected_idx.extend(range(len(metric_names), len(metric_names) + len(cats[name])))
            metric_names.extend(f"{name}={c}" for c in cats[name])
        self.booster_feature_names_ = tuple(names)
        self.metric_feature_names_ = tuple(metric_names)
        self.protected_metric_indices_ = tuple(sorted(protected_idx))

    # -- transforming ----------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "columns_"):
            raise ValidationError("this TableEncoder is not fitted yet; call fit first")

    def _columns_for(self, X: Any) -> list[_Column]:
        """The columns of new rows, checked against the training schema and put in training order."""
        self._check_fitted()
        cols, named = _read_columns(X, "X")
        if self.has_names_ and not named:
            if len(cols) != len(self.columns_):
                raise ValidationError(
                    f"X has {len(cols)} columns, but the model was trained on {len(self.columns_)} named columns: "
                    f"{', '.join(self.columns_)}"
                )
            raise ValidationError(
                f"X has no column names, but the model was trained on a table with the columns "
                f"{', '.join(self.columns_)}; pass a DataFrame with those columns"
            )
        if not self.has_names_ and named:
            raise ValidationError(
                f"X is a table with named columns, but the model was trained on an array of {len(self.columns_)} "
                f"unnamed columns; pass an array"
            )
        if not self.has_names_:
            if len(cols) != len(self.columns_):
                raise ValidationError(f"X has {len(cols)} columns, but the model was trained on {len(self.columns_)}")
        by_name = {c.name: c for c in cols}
        missing = [c for c in self.columns_ if c not in by_name]
        extra = [c for c in by_name if c not in self.kinds_]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"missing column{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}")
            if extra:
                parts.append(f"column{'s' if len(extra) > 1 else ''} not seen in training {', '.join(map(repr, extra))}")
            raise ValidationError(f"X does not have the training columns: {'; '.join(parts)}")
        out = [by_name[c] for c in self.columns_]
        for c in out:
            expected = self.kinds_[c.name]
            if c.kind == expected or (expected == "numeric" and c.kind == "boolean"):
                continue
            if expected == "boolean" and c.kind == "numeric":
                present = c.values[~c.missing]
                if np.isin(present, (0.0, 1.0)).all():
                    continue
            raise ValidationError(
                f"column {c.name!r} is {c.kind} (dtype {c.dtype}) but was {expected} in training "
                f"(dtype {self.dtypes_[c.name]}); convert it back before predicting"
            )
        return out

    def _encode(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """(numeric block, category codes) of new rows, warning about unseen categories."""
        cols = self._columns_for(X)
        num, cat = self._blocks(cols)
        if not cat.shape[1]:
            return num, np.empty((num.shape[0], 0))
        cat_cols = [c for c in cols if c.kind == "categorical"]
        codes = _codes(self._transformers["codes"], cat, cat_cols)
        self._warn_unseen(cat_cols, codes)
        return num, codes

    def _warn_unseen(self, cols: list[_Column], codes: np.ndarray) -> None:
        for j, c in enumerate(cols):
            unknown = codes[:, j] == _UNSEEN
            if unknown.any():
                unseen = sorted(set(c.values[unknown]))
                shown = ", ".join(map(repr, unseen[:10])) + (f" and {len(unseen) - 10} more" if len(unseen) > 10 else "")
                warnings.warn(
                    f"column {c.name!r} has {len(unseen)} value{'s' if len(unseen) > 1 else ''} not seen in training "
                    f"({shown}); they are treated as missing by the booster and as all-zero one-hot columns by the "
                    f"fair metric",
                    UnseenCategoryWarning, stacklevel=3,
                )

    def booster_matrix(self, X: Any) -> np.ndarray:
        """``X`` as the booster's float64 matrix (see the module docstring); columns
        :attr:`booster_feature_names_`, category codes in :attr:`categorical_features_`."""
        num, codes = self._encode(X)
        if not self.native_missing_ and num.shape[1]:
            num = self._transformers["metric_numeric"][0].transform(num)
        blocks = [num]
        if codes.shape[1]:
            if self.native_categorical_:
                blocks.append(np.where(codes == _UNSEEN, np.nan, codes))  # unseen: as missing
            else:
                blocks.append(self._transformers["booster_onehot"].transform(codes))
        full = np.hstack(blocks) if len(blocks) > 1 else num
        return np.ascontiguousarray(full, dtype=np.float64)

    def metric_matrix(self, X: Any) -> np.ndarray:
        """``X`` in the fair metric's coordinates (float64, no NaN); columns
        :attr:`metric_feature_names_`, protected ones :attr:`protected_metric_indices_`."""
        num, codes = self._encode(X)
        blocks = [self._transformers["metric_numeric"].transform(num) if num.shape[1] else num]
        if codes.shape[1]:
            blocks.append(self._transformers["metric_categorical"].transform(codes))
        full = np.hstack(blocks) if len(blocks) > 1 else blocks[0]
        return np.ascontiguousarray(full, dtype=np.float64)

    # -- persistence -----------------------------------------------------------------------
    def to_state(self) -> tuple[dict[str, Any], dict[str, bytes]]:
        """``(meta, blobs)``: a JSON-able description of the schema and the fitted scikit-learn
        transformers as skops bytes.  :meth:`from_state` rebuilds an identical encoder."""
        import skops.io as sio

        self._check_fitted()
        meta = {
            "format": _STATE_FORMAT,
            "version": _STATE_VERSION,
            "max_categories": int(self.max_categories),
            "columns": list(self.columns_),
            "kinds": [self.kinds_[c] for c in self.columns_],
            "dtypes": [self.dtypes_[c] for c in self.columns_],
            "categories": {name: list(cats) for name, cats in self.categories_.items()},
            "has_names": self.has_names_,
            "native_categorical": self.native_categorical_,
            "native_missing": self.native_missing_,
            "protected_columns": list(self.protected_columns_),
        }
        return meta, {_BLOB: sio.dumps(dict(self._transformers))}

    @classmethod
    def from_state(cls, meta: dict[str, Any], blobs: dict[str, bytes]) -> "TableEncoder":
        """The encoder stored by :meth:`to_state`.  The transformers are loaded by skops with
        only :data:`TRUSTED_TYPES` allowed; anything else is refused before it is loaded."""
        import skops.io as sio

        if not isinstance(meta, dict) or meta.get("format") != _STATE_FORMAT:
            raise ValidationError(f"not a stored TableEncoder (format {meta.get('format') if isinstance(meta, dict) else meta!r})")
        if meta.get("version") != _STATE_VERSION:
            raise ValidationError(f"stored TableEncoder version {meta.get('version')!r} is not supported (this budro reads {_STATE_VERSION})")
        try:
            blob = blobs[_BLOB]
            columns = [str(c) for c in meta["columns"]]
            kinds = list(meta["kinds"])
            dtypes = list(meta["dtypes"])
            categories = {str(k): tuple(str(v) for v in vs) for k, vs in meta["categories"].items()}
            flags = {k: meta[k] for k in ("has_names", "native_categorical", "native_missing")}
            protected = tuple(str(p) for p in meta["protected_columns"])
            max_categories = meta["max_categories"]
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValidationError(f"stored TableEncoder is incomplete: {exc!r}") from None
        if len(kinds) != len(columns) or len(dtypes) != len(columns) or not set(kinds) <= set(KINDS):
            raise ValidationError("stored TableEncoder: columns and kinds do not match")
        if set(categories) != {c for c, k in zip(columns, kinds) if k == "categorical"} or not set(protected) <= set(columns):
            raise ValidationError("stored TableEncoder: categories or protected columns do not match the columns")
        refused = sorted(_stored_types(blob) - set(TRUSTED_TYPES))
        if refused:
            raise ValidationError(f"stored TableEncoder holds types budro does not load: {', '.join(refused)}")
        transformers = sio.loads(blob, trusted=sorted(sio.get_untrusted_types(data=blob)))
        _check_transformers(transformers)
        self = cls(max_categories=max_categories)
        self.columns_ = tuple(columns)
        self.kinds_ = dict(zip(columns, kinds))
        self.dtypes_ = dict(zip(columns, dtypes))
        self.categories_ = categories
        self.has_names_ = bool(flags["has_names"])
        self.native_categorical_ = bool(flags["native_categorical"])
        self.native_missing_ = bool(flags["native_missing"])
        self.protected_columns_ = protected
        self._transformers = transformers
        self._layout()
        return self

    def __repr__(self) -> str:
        if not hasattr(self, "columns_"):
            return f"TableEncoder(max_categories={self.max_categories})"
        counts = {k: sum(1 for v in self.kinds_.values() if v == k) for k in KINDS}
        return (f"TableEncoder({len(self.columns_)} columns: {counts['numeric']} numeric, {counts['boolean']} boolean, "
                f"{counts['categorical']} categorical; protected {list(self.protected_columns_)})")


def _codes(encoder: Any, cat: np.ndarray, cols: list[_Column]) -> np.ndarray:
    """Category codes: NaN where the value is missing, :data:`_UNSEEN` where it is not a training
    category (the encoder, knowing no missing category, calls both unknown)."""
    codes = encoder.transform(cat)
    for j, c in enumerate(cols):
        codes[c.missing, j] = np.nan
    return codes


def _stored_types(blob: bytes) -> set[str]:
    """Every type named in a skops file's schema (a JSON member of the zip), read without loading
    anything: skops itself trusts every scikit-learn class, budro only :data:`TRUSTED_TYPES`."""
    import io
    import json
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as archive:
            schema = json.loads(archive.read("schema.json"))
    except (zipfile.BadZipFile, KeyError, ValueError, TypeError) as exc:
        raise ValidationError(f"stored TableEncoder: the transformers are not a skops file ({exc})") from None
    found: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "__class__" in node:
                found.add(f"{node.get('__module__')}.{node['__class__']}")
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _check_transformers(transformers: Any) -> None:
    """A loaded transformer dict holds exactly the pieces :meth:`TableEncoder.fit` makes."""
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder, StandardScaler

    expected = {
        "metric_numeric": (SimpleImputer, StandardScaler),
        "metric_categorical": (SimpleImputer, OneHotEncoder),
        "codes": (OrdinalEncoder,),
        "booster_onehot": (OneHotEncoder,),
    }
    if not isinstance(transformers, dict) or not set(transformers) <= set(expected):
        raise ValidationError("stored TableEncoder: unexpected transformers")
    for key, value in transformers.items():
        steps = [s for _, s in value.steps] if isinstance(value, Pipeline) else [value]
        kinds = expected[key]
        if len(steps) != len(kinds) or not all(type(s) in (k if isinstance(k, tuple) else (k,)) for s, k in zip(steps, kinds)):
            raise ValidationError(f"stored TableEncoder: transformer {key!r} is not what budro stores")
