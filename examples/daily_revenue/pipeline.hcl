# The daily revenue pipeline: every day, extract that day's transactions and
# FX rates, convert each transaction to USD at the rate of its own day, and
# publish the day's revenue as a partition of the Iceberg table
# analytics.fct_daily_revenue plus a one-line report.
#
# The story (the seeds'): for 90 days the join used the previous day's rate.
#
#   rewind run --catchup -var fx_rate_day=previous .   # 90 wrong days on main
#   rewind backfill plan daily_revenue --start 2025-07-01 --end 2025-09-28 \
#     --reprocess completed --max-active-runs 15       # the fix: the default
#   rewind backfill apply daily_revenue ...same flags  # branch, validate, cutover
#   rewind backfill rollback ID                        # back to the tag
#   rewind lake expire                                 # old version, after 14d
#
# The source systems are simulated by scripts/source.awk: every date yields
# the same transactions and rates on every machine.

variable "fx_rate_day" {
  type        = string
  default     = "same"
  description = "Which day's FX rate converts a transaction: same (correct) or previous (the bug)."
}

variable "output_dir" {
  type        = string
  default     = "out"
  description = "Where the report task publishes revenue_DS.csv and report_DS.txt, relative to this directory."
}

pipeline "daily_revenue" {
  description      = "Daily revenue in USD, each transaction converted at its own day's FX rate."
  schedule         = "@daily"
  timezone         = "UTC"
  start_date       = "2025-07-01"
  end_date         = "2025-09-28"
  catchup          = true
  max_active_runs  = 15
  max_active_tasks = 30
  tags             = ["finance", "revenue"]

  task "extract_transactions" {
    command     = ["sh", "scripts/extract_transactions.sh", run.ds, "${run.dir}/transactions.csv"]
    retries     = 2
    retry_delay = "30s"
    timeout     = "10m"
  }

  task "extract_fx_rates" {
    command     = ["sh", "scripts/extract_fx_rates.sh", run.ds, "${run.dir}/fx_rates.csv"]
    retries     = 2
    retry_delay = "30s"
    timeout     = "10m"
  }

  # The join uses the rate of the transaction's own day, unless
  # -var fx_rate_day=previous reproduces the bug. The value reaches the
  # script as an environment variable, never spliced into a shell string.
  task "fx_join" {
    depends_on = [task.extract_transactions, task.extract_fx_rates]
    command = [
      "sh", "scripts/fx_join.sh",
      "${run.dir}/transactions.csv",
      "${run.dir}/fx_rates.csv",
      "${run.dir}/revenue.csv",
    ]
    env     = { FX_RATE_DAY = var.fx_rate_day }
    timeout = "30m"
  }

  task "report" {
    depends_on = [task.fx_join]
    command    = ["sh", "scripts/report.sh", run.ds, "${run.dir}/revenue.csv", "${run.dir}/transactions.csv", var.output_dir]
  }

  # One partition per day of analytics.fct_daily_revenue, replaced when the
  # run succeeds: on main for scheduled runs, on the branch backfill_<ID>
  # for a backfill, which main only sees after validation and cutover.
  output "revenue" {
    table     = "analytics.fct_daily_revenue"
    from      = "${run.dir}/revenue.csv"
    columns   = { ds = "date", currency = "string", amount_usd = "double" }
    partition = "ds"
    retention = "14d"
    validate {
      max_change = { amount_usd = 0.05 }
    }
  }
}
