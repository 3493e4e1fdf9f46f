"""Hook implementations: what budro loads through the "budro" entry-point group."""

import budro

from budro_weighted_features.metric import WeightedFeatures, WeightedFeaturesMetric


@budro.hookimpl
def budro_fair_metrics():
    yield budro.FairMetricPlugin(
        name="weighted-features",
        factory=WeightedFeatures,
        description="Distance on chosen features only, each with a weight (ignores all others).",
        capabilities={"embedding"},
        metric_classes=(WeightedFeaturesMetric,),  # so metric_from_dict rebuilds this class by its kind
    )
