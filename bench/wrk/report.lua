-- Prints wrk's totals as one machine-readable line for bench/bench.py.
-- Latencies are in microseconds; errors are wrk's own counters (status counts
-- responses that were not 2xx or 3xx).

local function fmt(n)
   return string.format("%.3f", n)
end

function done(summary, latency, requests)
   local e = summary.errors
   io.write("BENCH_RESULT {")
   io.write('"requests":', summary.requests, ',')
   io.write('"bytes":', summary.bytes, ',')
   io.write('"duration_us":', summary.duration, ',')
   io.write('"connect":', e.connect, ',"read":', e.read, ',"write":', e.write,
            ',"status":', e.status, ',"timeout":', e.timeout, ',')
   io.write('"lat_mean":', fmt(latency.mean), ',"lat_max":', latency.max, ',')
   io.write('"p50":', latency:percentile(50.0), ',"p90":', latency:percentile(90.0),
            ',"p99":', latency:percentile(99.0), ',"p999":', latency:percentile(99.9))
   io.write("}\n")
end
