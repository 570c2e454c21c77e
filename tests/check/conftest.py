# Invariants: one real local SparkSession for the whole test directory (starting one costs
# seconds), with 2 shuffle partitions: the test traces are tiny and Spark's default of 200
# partitions makes every shuffle several times slower.
# Whole-stage codegen and AQE are off for the same reason. No mocks: tests write real Parquet.
import pytest


@pytest.fixture(scope="session")
def spark():
    from bus1py.check.spark import get_session
    # Tiny traces: compiling whole-stage Java code and adaptive re-planning cost more than
    # they save, so tests turn both off (results do not depend on either).
    return get_session("local[2]", shuffle_partitions=2, extra_conf={
        "spark.sql.codegen.wholeStage": "false", "spark.sql.adaptive.enabled": "false"})
