-- wrk.lua - request mix for bench/http/run, chosen by the WRK_MIX
-- environment variable: "get" (GET /v1/stats), "post" (POST /v1/tasks, a
-- task due in an hour so no worker is needed), "mixed" (alternating).
-- done() prints one RESULT line that bench/http/run parses.
local mix = os.getenv("WRK_MIX") or "mixed"
local n = 0
local post = wrk.format("POST", "/v1/tasks", {["Content-Type"] = "application/json"},
  '{"kind":"bench","payload":"{\\"order\\":42}","in":"1h"}')
local get = wrk.format("GET", "/v1/stats")

request = function()
  n = n + 1
  if mix == "get" or (mix == "mixed" and n % 2 == 0) then
    return get
  end
  return post
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d duration_us=%d bytes=%d connect=%d read=%d write=%d status=%d timeout=%d " ..
    "p50_us=%d p90_us=%d p99_us=%d max_us=%d mean_us=%.0f\n",
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean))
end
