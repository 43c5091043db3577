-- wrk script: POST /v1/jobs with a body from a file per request.
-- Arguments: FILE TOKEN NTHREADS [MODE]. Each line of FILE is one JSON body; thread k of n takes
-- lines k, k+n, k+2n, … MODE "once" (the distinct-previews run) sends each body at most once:
-- a thread that has sent all of its bodies stops rather than cycle into replays, and done()
-- prints "exhausted: N" (requests it had no new body for; the benchmark sizes the bodies from
-- the measured rate so that this stays 0) and "created: N" (answers 201 Created, a new job
-- each). MODE "cycle" (the replay run) repeats the bodies.
local counter = 0
local threads = {}
local bodies = {}
local next_index = 1
local once = false
exhausted = 0
created = 0  -- answers 201 (a new job); 200 is the answer to a replay

function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

function init(args)
  local file, token, nthreads = args[1], args[2], tonumber(args[3])
  once = args[4] == "once"
  local i = 0
  for line in io.lines(file) do
    if i % nthreads == tid then bodies[#bodies + 1] = line end
    i = i + 1
  end
  if #bodies == 0 and not once then  -- fewer lines than threads: every thread takes them all
    for line in io.lines(file) do bodies[#bodies + 1] = line end
  end
  headers = { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token }
end

function request()
  if next_index > #bodies then
    if once then  -- out of new bodies: stop this thread; this request makes no job
      exhausted = exhausted + 1
      wrk.thread:stop()
      return wrk.format("GET", "/healthz")
    end
    next_index = 1
  end
  local body = bodies[next_index]
  next_index = next_index + 1
  return wrk.format("POST", "/v1/jobs", headers, body)
end

function response(status, headers, body)
  if status == 201 then created = created + 1 end
end

function done(summary, latency, requests)
  local out, made = 0, 0
  for _, thread in ipairs(threads) do
    out = out + (thread:get("exhausted") or 0)
    made = made + (thread:get("created") or 0)
  end
  io.write(string.format("exhausted: %d\ncreated: %d\n", out, made))
end
