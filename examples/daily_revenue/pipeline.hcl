# The daily revenue pipeline: every day, extract that day's transactions and
# FX rates, convert each transaction to USD at the rate of its own day, and
# publish the day's revenue report.

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
  end_date         = "2025-07-10"
  catchup          = true
  max_active_runs  = 5
  max_active_tasks = 10
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

  # The join uses the rate of the transaction's own day, never the previous one.
  task "fx_join" {
    depends_on = [task.extract_transactions, task.extract_fx_rates]
    command = [
      "sh", "scripts/fx_join.sh",
      "${run.dir}/transactions.csv",
      "${run.dir}/fx_rates.csv",
      "${run.dir}/revenue.csv",
    ]
    timeout = "30m"
  }

  task "report" {
    depends_on = [task.fx_join]
    command    = ["sh", "scripts/report.sh", run.ds, "${run.dir}/revenue.csv", var.output_dir]
  }
}
