-- wrk script: POST a JSON step body; one connection per thread, each with its own session key.
-- wrk -t N -c N -s post.lua URL -- KEYS_FILE [DONE_EVERY] [N_ENVS]
-- KEYS_FILE has one session key per line ("-" for none: the echo server); thread i uses line i.
-- DONE_EVERY > 0 sends "done": true every that many steps (episodes end, returns are recorded).
-- N_ENVS > 0 sends a vector step instead (a session logged in with "n_envs": N_ENVS): N_ENVS CartPole
-- observations, rewards and no ends in every body (DONE_EVERY is then ignored: no episode ends).
-- Prints one JSON line at the end: requests, seconds, non-2xx, socket errors, latency percentiles (ms).

local threads = {}
local counter = 0

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

local function repeated(item, n)
  local items = {}
  for i = 1, n do items[i] = item end
  return "[" .. table.concat(items, ",") .. "]"
end

function init(args)
  local keys = {}
  for line in io.lines(args[1]) do table.insert(keys, line) end
  key = keys[(id % #keys) + 1]
  done_every = tonumber(args[2] or "0")
  n_envs = tonumber(args[3] or "0")
  step = 0
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  body_open = '{"session_key":"' .. key .. '","obs":[0.01,-0.02,0.03,0.04],"reward":1.0,"done":'
  if n_envs > 0 then
    vector_body = '{"session_key":"' .. key .. '","obs":' .. repeated("[0.01,-0.02,0.03,0.04]", n_envs) ..
      ',"reward":' .. repeated("1.0", n_envs) .. ',"terminated":' .. repeated("false", n_envs) ..
      ',"truncated":' .. repeated("false", n_envs) .. '}'
  end
end

function request()
  if vector_body then return wrk.format(nil, nil, nil, vector_body) end
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
