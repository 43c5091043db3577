-- wrk script: POST /v1/jobs with a different commit body per request.
-- Each line of the bodies file is one JSON body; thread k of n takes lines k, k+n, k+2n, …
local counter = 0
local threads = {}
local bodies = {}
local next_index = 1

function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

function init(args)
  local file, token, nthreads = args[1], args[2], tonumber(args[3])
  local i = 0
  for line in io.lines(file) do
    if i % nthreads == tid then bodies[#bodies + 1] = line end
    i = i + 1
  end
  if #bodies == 0 then  -- fewer lines than threads: every thread takes them all
    for line in io.lines(file) do bodies[#bodies + 1] = line end
  end
  headers = { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token }
end

function request()
  local body = bodies[next_index]
  next_index = next_index % #bodies + 1
  return wrk.format("POST", "/v1/jobs", headers, body)
end
