"""spark-submit entry point: `meltwater serve` as a Spark application (see README.md here).

spark-submit starts this file as the driver; the service takes the SparkSession spark-submit
configured (its master, deploy mode, resources), so the configuration leaves out
[spark] master.
"""

import sys

from meltwater.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["serve", *sys.argv[1:]]))
