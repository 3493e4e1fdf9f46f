"""The :class:`Dataset` container every loader returns, and counterfactual definitions.

A :class:`Dataset` holds the *unstandardised* encoded features.  Standardisation is a modelling
step: it must be fitted on the training rows only, so it happens when the data are split
(:meth:`Dataset.split`, :meth:`Dataset.train_test_split`) or through the scikit-learn transformer
that :meth:`Dataset.make_preprocessor` returns.
"""

from __future__ import annotations

import itertools
import numbers
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from budro.exceptions import ValidationError

__all__ = ["ColumnAssignments", "Dataset"]


def require_pandas(caller: str):
    """Import pandas, or say how to install it (the data-set loaders need it)."""
    try:
        import pandas
    except ImportError:  # pragma: no cover - pandas is installed with budro[pandas] / budro[test]
        raise ImportError(f"{caller} needs pandas: pip install 'budro[pandas]'") from None
    return pandas


class ColumnAssignments:
    """Counterfactual copies of X, each with some columns set to constants.

    Calling the object on X returns one copy of X per assignment, in the order given; each copy
    differs from X only in the columns its assignment names.  This is the construction of the
    paper's consistency scores (Appendix B.2): for an attribute with values V, one copy of the
    data per value in V, the attribute constant on each copy.

    Parameters
    ----------
    assignments : sequence of mappings column -> number
        One mapping per copy.  Keys are column names when X is a pandas DataFrame and integer
        positions when X is an array.  At least one assignment, none of them empty.

    Examples
    --------
    >>> gr = ColumnAssignments.product({"sex": [0, 1], "race": [0, 1]})   # four copies
    >>> spouse = ColumnAssignments.one_hot(["rel=Husband", "rel=Wife", "rel=Own-child"],
    ...                                    active=["rel=Husband", "rel=Wife"])  # two copies
    """

    def __init__(self, assignments: Sequence[Mapping[Any, float]]):
        if isinstance(assignments, Mapping) or not isinstance(assignments, Sequence) or not assignments:
            raise ValidationError(
                f"{type(self).__name__}: assignments must be a non-empty sequence of mappings column -> value "
                f"(one per counterfactual copy), got {assignments!r}"
            )
        checked = []
        for k, assignment in enumerate(assignments):
            if not isinstance(assignment, Mapping) or not assignment:
                raise ValidationError(
                    f"{type(self).__name__}: assignments[{k}] must be a non-empty mapping column -> value, got {assignment!r}"
                )
            checked.append({column: self._value(k, column, value) for column, value in assignment.items()})
        self.assignments: tuple[dict[Any, Any], ...] = tuple(checked)

    def _value(self, k: int, column: Any, value: Any) -> Any:
        """The value of ``column`` in assignment ``k`` as stored, or a ValidationError (numbers only here;
        :class:`budro.evaluation.ColumnValues` also takes strings and booleans)."""
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value):
            raise ValidationError(f"ColumnAssignments: assignments[{k}][{column!r}] must be a finite number, got {value!r}")
        return float(value)

    @classmethod
    def one_hot(cls, columns: Sequence[Any], active: Sequence[Any] | None = None):
        """One copy per category of a one-hot encoded attribute.

        Parameters
        ----------
        columns : sequence
            Every column of the attribute's one-hot encoding.
        active : sequence, optional
            The categories (a subset of ``columns``) that get a copy, in this order; default all.
            In the copy for category ``c`` column ``c`` is 1 and the other ``columns`` are 0.
        """
        columns = list(columns)
        if not columns or len(set(columns)) != len(columns):
            raise ValidationError(f"{cls.__name__}.one_hot: columns must be a non-empty list without repeats, got {columns!r}")
        active = columns if active is None else list(active)
        unknown = [c for c in active if c not in columns]
        if not active or unknown:
            raise ValidationError(
                f"{cls.__name__}.one_hot: active must be a non-empty subset of columns; not in columns: {unknown!r}"
            )
        return cls([{c: float(c == on) for c in columns} for on in active])

    @classmethod
    def product(cls, values: Mapping[Any, Sequence[Any]]):
        """One copy per combination of values (the Cartesian product, in the order given).

        ``ColumnAssignments.product({"sex": [0, 1], "race": [0, 1]})`` gives the four copies
        (0, 0), (0, 1), (1, 0), (1, 1) of (sex, race).
        """
        if not isinstance(values, Mapping) or not values:
            raise ValidationError(
                f"{cls.__name__}.product: values must be a non-empty mapping column -> list of values, got {values!r}"
            )
        columns = list(values)
        lists = []
        for column in columns:
            v = values[column]
            if isinstance(v, (str, bytes)) or not isinstance(v, Iterable):
                raise ValidationError(f"{cls.__name__}.product: values[{column!r}] must be a list of values, got {v!r}")
            v = list(v)
            if not v:
                raise ValidationError(f"{cls.__name__}.product: values[{column!r}] is empty")
            lists.append(v)
        return cls([dict(zip(columns, combo)) for combo in itertools.product(*lists)])

    @property
    def columns(self) -> tuple:
        """Every column some copy changes (in first-seen order)."""
        return tuple(dict.fromkeys(c for a in self.assignments for c in a))

    def __len__(self) -> int:
        return len(self.assignments)

    def __call__(self, X: Any) -> list[Any]:
        """The counterfactual copies of ``X`` (a DataFrame or a 2-D array), one per assignment."""
        try:
            import pandas as pd
        except ImportError:  # pragma: no cover - pandas is a test dependency
            pd = None
        if pd is not None and isinstance(X, pd.DataFrame):
            missing = [c for c in self.columns if c not in X.columns]
            if missing:
                raise ValidationError(f"ColumnAssignments: X has no column(s) {missing!r}")
            copies = []
            for assignment in self.assignments:
                Xc = X.copy()
                for column, value in assignment.items():
                    Xc[column] = np.full(len(Xc), value, dtype=np.result_type(Xc[column].dtype, float))
                copies.append(Xc)
            return copies
        arr = np.asarray(X)
        if arr.ndim != 2:
            raise ValidationError(f"ColumnAssignments: X must be a DataFrame or a 2-D array, got shape {arr.shape}")
        for c in self.columns:
            if isinstance(c, bool) or not isinstance(c, numbers.Integral) or not -arr.shape[1] <= c < arr.shape[1]:
                raise ValidationError(
                    f"ColumnAssignments: with an array X, columns must be integer positions in [0, {arr.shape[1]}); got {c!r}"
                )
        copies = []
        for assignment in self.assignments:
            Xc = arr.astype(np.result_type(arr.dtype, float), copy=True)
            for column, value in assignment.items():
                Xc[:, column] = value
            copies.append(Xc)
        return copies

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.assignments)} copies over columns {list(self.columns)!r})"


@dataclass(eq=False)
class Dataset:
    """A data set with what training and fairness evaluation need.

    The loaders return *unstandardised* encoded features; standardise with :meth:`split` or
    :meth:`train_test_split` (the scaler is fitted on the training rows only) or with the
    transformer of :meth:`make_preprocessor`.

    Attributes
    ----------
    X : pandas.DataFrame
        Features, with named columns (numeric; categorical attributes one-hot encoded).
    y : numpy array (n,)
        Labels.
    protected : list of str
        Protected attributes (column names of X), e.g. for the fair metric.
    groups : dict of str -> array (n,)
        Group membership per protected attribute (two values each), for the gap metrics.
    counterfactuals : dict of str -> callable
        Each maps X to the list of counterfactual copies of X that a consistency score compares
        (e.g. :class:`ColumnAssignments`), keyed by the score's name in the paper ("S-cons", ...).
    description : str
        Source, preprocessing and coding of the columns.
    continuous : list of str
        The columns to standardise (centre and scale); the rest are passed through.
    name : str
        Short name of the data set ("german", "adult", ...).
    preprocessor : fitted transformer or None
        The fitted transformer already applied to X (set by :meth:`split`); None for raw data.
    """

    X: Any
    y: np.ndarray
    protected: list[str]
    groups: dict[str, np.ndarray] = field(default_factory=dict)
    counterfactuals: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    continuous: list[str] = field(default_factory=list)
    name: str = ""
    preprocessor: Any = None

    def __post_init__(self) -> None:
        n = len(self.X)
        self.y = np.asarray(self.y)
        if self.y.ndim != 1 or self.y.shape[0] != n:
            raise ValidationError(f"Dataset: y must be 1-D with one label per row of X ({n}), got shape {self.y.shape}")
        groups = {}
        for key, g in dict(self.groups).items():
            g = np.asarray(g)
            if g.shape != (n,):
                raise ValidationError(f"Dataset: groups[{key!r}] must have shape ({n},) (one entry per row of X), got {g.shape}")
            groups[key] = g
        self.groups = groups
        for key, cf in dict(self.counterfactuals).items():
            if not callable(cf):
                raise ValidationError(
                    f"Dataset: counterfactuals[{key!r}] must be callable (X -> list of copies of X), got {cf!r}"
                )
        columns = getattr(self.X, "columns", None)
        if columns is not None:
            for attr in ("protected", "continuous"):
                missing = [c for c in getattr(self, attr) if c not in columns]
                if missing:
                    raise ValidationError(f"Dataset: {attr} names column(s) {missing!r} that X does not have")
        elif self.continuous:
            raise ValidationError("Dataset: continuous needs X to be a pandas DataFrame with named columns")

    # ------------------------------------------------------------------ shape

    @property
    def n_samples(self) -> int:
        return int(self.y.shape[0])

    @property
    def feature_names(self) -> list[str]:
        """The column names of X."""
        return list(self.X.columns)

    @property
    def protected_indices(self) -> list[int]:
        """Positions of the protected columns in X (for ``protected=`` of a fair metric or estimator)."""
        columns = list(self.X.columns)
        return [columns.index(c) for c in self.protected]

    # ------------------------------------------------------------------ preprocessing

    def make_preprocessor(self):
        """An unfitted scikit-learn transformer that standardises :attr:`continuous`.

        A ``ColumnTransformer`` with a ``StandardScaler`` on the continuous columns and every
        other column passed through unchanged, with pandas output and the original column names.
        Its output lists the continuous columns first, then the others in their order; the
        built-in loaders put the continuous columns first, so for them the order is that of X.
        Fit it on training rows only (``pre.fit(X_train)``), then transform both splits.
        """
        from sklearn.compose import ColumnTransformer
        from sklearn.preprocessing import StandardScaler

        transformer = ColumnTransformer(
            [("standardize", StandardScaler(), list(self.continuous))],
            remainder="passthrough",
            verbose_feature_names_out=False,
        )
        return transformer.set_output(transform="pandas")

    def subset(self, rows: Any) -> "Dataset":
        """The rows ``rows`` (integer positions or a boolean mask), X's index reset, nothing rescaled."""
        rows = self._check_rows(rows, "rows")
        return replace(
            self,
            X=self.X.iloc[rows].reset_index(drop=True),
            y=self.y[rows],
            groups={k: g[rows] for k, g in self.groups.items()},
        )

    def split(self, train: Any, test: Any, *, standardize: bool = True) -> tuple["Dataset", "Dataset"]:
        """Split into a training and a test data set, standardised with the training rows' statistics.

        Parameters
        ----------
        train, test : array of int positions or boolean mask
            The rows of each part.
        standardize : bool, default True
            Fit :meth:`make_preprocessor` on the training rows and apply it to both parts.  Each
            part keeps X's column order and holds the fitted transformer in ``preprocessor``.
            Its counterfactual definitions still take values in the original units: a
            definition that sets a continuous column is applied to the unstandardised data and
            the result standardised again (columns it does not change stay bit for bit equal).

        Returns
        -------
        (train, test) : two :class:`Dataset`
        """
        if not isinstance(standardize, bool):
            raise ValidationError(f"Dataset.split: standardize must be True or False, got {standardize!r}")
        tr, te = self.subset(train), self.subset(test)
        if not standardize or not self.continuous:
            return tr, te
        if self.preprocessor is not None:
            raise ValidationError("Dataset.split: this data set is already standardised; split the raw data set instead")
        pre = self.make_preprocessor().fit(tr.X)
        return tr._standardized(pre), te._standardized(pre)

    def train_test_split(self, test_size: float = 0.2, *, random_state: Any = None, stratify: bool = True,
                         standardize: bool = True) -> tuple["Dataset", "Dataset"]:
        """A random (by default label-stratified) split, then :meth:`split`.

        ``test_size=0.2`` gives the paper's 80% / 20% splits.  ``random_state`` is passed to
        :func:`sklearn.model_selection.train_test_split`.
        """
        from sklearn.model_selection import train_test_split

        if not isinstance(stratify, bool):
            raise ValidationError(f"Dataset.train_test_split: stratify must be True or False, got {stratify!r}")
        rows = np.arange(self.n_samples)
        try:
            train, test = train_test_split(rows, test_size=test_size, random_state=random_state,
                                           stratify=self.y if stratify else None)
        except ValueError as exc:
            raise ValidationError(f"Dataset.train_test_split: {exc}") from None
        return self.split(train, test, standardize=standardize)

    # ------------------------------------------------------------------ helpers

    def _check_rows(self, rows: Any, name: str) -> np.ndarray:
        n = self.n_samples
        arr = np.asarray(rows)
        if arr.dtype == bool:
            if arr.shape != (n,):
                raise ValidationError(f"Dataset: boolean {name} must have shape ({n},), got {arr.shape}")
            return np.flatnonzero(arr)
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise ValidationError(f"Dataset: {name} must be a 1-D array of integer row positions or a boolean mask")
        if arr.size and (arr.min() < -n or arr.max() >= n):
            raise ValidationError(f"Dataset: {name} holds positions outside [0, {n})")
        return arr.astype(np.intp)

    def _standardized(self, pre: Any) -> "Dataset":
        X = pre.transform(self.X)[list(self.X.columns)]
        scaler = pre.named_transformers_["standardize"]
        counterfactuals = {
            key: _StandardizedCounterfactual(cf, list(self.continuous), scaler.mean_, scaler.scale_)
            for key, cf in self.counterfactuals.items()
        }
        return replace(self, X=X, counterfactuals=counterfactuals, preprocessor=pre)

    def __repr__(self) -> str:
        shape = getattr(self.X, "shape", (self.n_samples,))
        scaled = ", standardised" if self.preprocessor is not None else ""
        return (f"Dataset(name={self.name!r}, X={shape[0]} x {shape[1] if len(shape) > 1 else '?'}{scaled}, "
                f"protected={self.protected!r}, groups={list(self.groups)!r}, counterfactuals={list(self.counterfactuals)!r})")


class _StandardizedCounterfactual:
    """A counterfactual definition given in raw units, applied to standardised data.

    The continuous columns of X are mapped back to raw units, the definition is applied, and
    every continuous entry it changed is standardised again; all other entries are copied.
    """

    def __init__(self, definition: Callable[[Any], list], continuous: list[str], mean: np.ndarray, scale: np.ndarray):
        self.definition = definition
        self.continuous = continuous
        self.mean = np.asarray(mean, dtype=float)
        self.scale = np.asarray(scale, dtype=float)

    @property
    def columns(self) -> tuple:
        """The columns the underlying definition changes, where it says so."""
        return tuple(getattr(self.definition, "columns", ()))

    def __call__(self, X: Any) -> list[Any]:
        import pandas as pd

        if not isinstance(X, pd.DataFrame):
            raise ValidationError(
                "this counterfactual definition belongs to a standardised Dataset and expects a DataFrame with its columns"
            )
        missing = [c for c in self.continuous if c not in X.columns]
        if missing:
            raise ValidationError(f"counterfactual definition: X has no column(s) {missing!r}")
        scaled = X[self.continuous].to_numpy(dtype=float)
        raw_values = scaled * self.scale + self.mean
        raw = X.copy()
        raw[self.continuous] = raw_values
        out = []
        for copy in self.definition(raw):
            result = copy.copy()
            new = copy[self.continuous].to_numpy(dtype=float)
            result[self.continuous] = np.where(new != raw_values, (new - self.mean) / self.scale, scaled)
            out.append(result)
        return out

    def __repr__(self) -> str:
        return f"standardized({self.definition!r})"
