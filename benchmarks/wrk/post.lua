-- wrk script: POST a JSON step body; one connection per thread, each with its own session key.
-- wrk -t N -c N -s post.lua URL -- KEYS_FILE [DONE_EVERY]
-- KEYS_FILE has one session key per line ("-" for none: the echo server); thread i uses line i.
-- DONE_EVERY > 0 sends "done": true every that many steps (episodes end, returns are recorded).
-- Prints one JSON line at the end: requests, seconds, non-2xx, socket errors, latency percentiles (ms).

local threads = {}
local counter = 0

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

function init(args)
  local keys = {}
  for line in io.lines(args[1]) do table.insert(keys, line) end
  key = keys[(id % #keys) + 1]
  done_every = tonumber(args[2] or "0")
  step = 0
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  body_open = '{"session_key":"' .. key .. '","obs":[0.01,-0.02,0.03,0.04],"reward":1.0,"done":'
end

function request()
  step = step + 1
  local done = "false"
  if done_every > 0 and step % done_every == 0 then done = "true" end
  return wrk.format(nil, nil, nil, body_open .. done .. ',"info":{}}')
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"seconds":%.3f,"non2xx":%d,"socket_errors":%d,"p50_ms":%.4f,"p90_ms":%.4f,"p99_ms":%.4f,"max_ms":%.3f}\n',
    summary.requests, summary.duration / 1e6, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50) / 1e3, latency:percentile(90) / 1e3, latency:percentile(99) / 1e3, latency.max / 1e3))
end
