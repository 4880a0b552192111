# The events pipeline: one day of the event stream is extracted, then loaded
# into one table per event type. Black Friday carries 20 times the usual
# traffic, so its runs go to the large pool.

pool "large" {
  slots  = 2
  memory = "8GiB"
  cpus   = 8
}

pool "standard" {
  slots           = 8
  memory          = "2GiB"
  cpus            = 2
  oom_escalate_to = "large"
}

variable "tables" {
  type        = list(string)
  default     = ["orders", "sessions", "clicks"]
  description = "The tables loaded from the event stream: one load task each."
}

variable "output_dir" {
  type    = string
  default = "out"
}

locals {
  black_friday = "2025-11-28"
}

pipeline "events" {
  description     = "Daily event stream, loaded into one table per event type."
  schedule        = "@daily"
  timezone        = "UTC"
  start_date      = "2025-11-24"
  end_date        = "2025-11-30"
  max_active_runs = 3
  default_pool    = "standard"
  tags            = ["events", "skew"]
  params = {
    source = "event-stream"
  }

  skew {
    hot_dates  = [local.black_friday]
    hot_when   = run.month == 11 && run.weekday == "Friday" && run.day >= 23 && run.day <= 29
    probe      = ["sh", "scripts/probe.sh", run.ds]
    hot_factor = 3
    pool       = "large"
  }

  task "extract" {
    command     = ["sh", "scripts/extract_events.sh", run.ds, run.dir]
    retries     = 2
    retry_delay = "1m"
    timeout     = "15m"
  }

  # One load task per table: load_orders, load_sessions, load_clicks.
  task "load" {
    for_each                  = toset(var.tables)
    depends_on                = [task.extract]
    command                   = ["sh", "scripts/load_table.sh", each.key, run.ds, run.dir]
    retries                   = 3
    retry_delay               = "30s"
    retry_exponential_backoff = true
    env = {
      TABLE              = each.key
      MEMORY_LIMIT_BYTES = "${pool.memory}"
    }
  }

  task "summarize" {
    depends_on = [task.load]
    command    = ["sh", "scripts/summarize.sh", run.ds, run.dir, var.output_dir]
  }
}
