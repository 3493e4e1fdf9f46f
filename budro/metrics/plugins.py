"""budro's built-in fair-metric learners, registered through the same hook as third-party ones."""

from __future__ import annotations

from budro.hookspecs import hookimpl
from budro.plugin_types import FairMetricPlugin


@hookimpl
def budro_fair_metrics():
    from budro.metrics.explore import Explore, ExploreMetric
    from budro.metrics.linear import LinearMetric
    from budro.metrics.simple import FeatureMetric, Features, Mahalanobis, MatrixMetric, ProtectedEuclidean
    from budro.metrics.subspace import SensitiveSubspace, SubspaceMetric
    from budro.metrics.svd import SVDSubspace

    yield FairMetricPlugin(
        name="sensitive-subspace",
        factory=SensitiveSubspace,
        description="Ignore a learned sensitive subspace: indicator vectors of protected features plus linear models predicting them.",
        capabilities={"embedding", "subspace", "project"},
        metric_classes=(SubspaceMetric,),
    )
    yield FairMetricPlugin(
        name="svd-subspace",
        factory=SVDSubspace,
        description="Ignore the top singular directions of the variation within user-given groups of comparable individuals.",
        capabilities={"embedding", "subspace", "project", "needs-groups"},
        metric_classes=(SubspaceMetric,),
    )
    yield FairMetricPlugin(
        name="explore",
        factory=Explore,
        description="EXPLORE: a Mahalanobis metric learned from pairs labelled comparable or not (Mukherjee et al. 2020).",
        capabilities={"embedding", "needs-pairs"},
        metric_classes=(ExploreMetric,),
    )
    yield FairMetricPlugin(
        name="protected-euclidean",
        factory=ProtectedEuclidean,
        description="Euclidean distance on every column except the protected ones.",
        capabilities={"embedding"},
        metric_classes=(FeatureMetric,),
    )
    yield FairMetricPlugin(
        name="features",
        factory=Features,
        description="(Weighted) Euclidean distance on a chosen subset of the features (the synthetic example's metric).",
        capabilities={"embedding"},
        metric_classes=(FeatureMetric,),
    )
    yield FairMetricPlugin(
        name="mahalanobis",
        factory=Mahalanobis,
        description="A user-given symmetric positive semidefinite matrix M: d(x, x')^2 = (x - x')^T M (x - x').",
        capabilities={"embedding"},
        metric_classes=(MatrixMetric, LinearMetric,),
    )
