-- Shared by the scenario scripts: build the POST once, print a machine-readable summary at the end.
local M = {}
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"

-- scenario: value of X-Bench-Scenario (the fake upstream picks its response by it)
-- payload:  file under bench/payloads/ sent as the request body
function M.setup(scenario, payload)
  local f = assert(io.open(dir .. "../payloads/" .. payload, "rb"))
  local body = (f:read("*a"):gsub("%s+$", ""))
  f:close()
  wrk.method = "POST"
  wrk.body = body
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Authorization"] = "Bearer sk-bench-not-a-key"
  wrk.headers["X-Bench-Scenario"] = scenario
end

-- One line the runner parses; wrk's own human-readable report is printed before it.
-- A non-2xx response counts in err_status; wrk counts a request only once its whole body
-- (Content-Length or the final chunk of a chunked stream) has been read.
function M.done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_RESULT {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"err_connect":%d,"err_read":%d,"err_write":%d,"err_status":%d,"err_timeout":%d,' ..
    '"lat_mean_us":%.1f,"lat_p50_us":%d,"lat_p90_us":%d,"lat_p99_us":%d,"lat_max_us":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end

return M
