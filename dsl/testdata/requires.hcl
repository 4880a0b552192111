locals {
  root = "data"
}
pipeline "revenue" {
  schedule   = "@daily"
  timezone   = "Asia/Tokyo"
  start_date = "2025-07-01"

  requires "transactions" {
    path = "data/transactions/${run.ds}.csv"
  }
  requires "partitions" {
    path = "${local.root}/events/${run.ds_nodash}/*.parquet"
  }
  requires "nonempty" {
    command = ["test", "-s", "data/transactions/${run.ds}.csv"]
  }
  requires "shell" {
    command = "echo checking >&2; test \"$REWIND_DS\" = 2025-07-03 || { echo \"missing day $REWIND_DS\" >&2; exit 3; }"
  }
  requires "env" {
    command = ["sh", "-c", "printf '%s|' \"$REWIND_PIPELINE\" \"$REWIND_DS\" \"$REWIND_DS_NODASH\" \"$REWIND_LOGICAL_DATE\" \"$REWIND_DATA_INTERVAL_START\" \"$REWIND_DATA_INTERVAL_END\" \"$PWD\" \"$REWIND_TEST_INHERITED\" >&2; exit 1"]
  }
  requires "truth" {
    command = ["true"]
  }
  requires "falsity" {
    command = ["false"]
  }
  requires "absent" {
    command = ["rewind-no-such-program-for-requires"]
  }

  task "a" {
    command = "true"
  }
}
