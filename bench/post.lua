-- wrk script for bench/run.sh: every request is a POST (WRK_METHOD: another
-- method, e.g. GET for the run list) to the path given on
-- the wrk command line, with an empty body (Content-Length: 0), or with the
-- content of the file named by WRK_BODY_FILE and the headers in WRK_HEADERS
-- ("Name: value" lines) when those are set (the signed-webhook cases). Counts the
-- responses by HTTP status in each thread and prints, when wrk is done:
--   WRKSUM <duration_us> <requests> <connect> <read> <write> <timeout> errors
--   STATUS <code> <count>       (one line per status seen)
wrk.method = os.getenv("WRK_METHOD") or "POST"
wrk.body = ""

local body_file = os.getenv("WRK_BODY_FILE")
if body_file and body_file ~= "" then
   local f = assert(io.open(body_file, "rb"))
   wrk.body = f:read("*a")
   f:close()
end
for line in (os.getenv("WRK_HEADERS") or ""):gmatch("[^\n]+") do
   local k, v = line:match("^([^:]+):%s*(.*)$")
   if k then
      wrk.headers[k] = v
   end
end

local threads = {}

function setup(thread)
   table.insert(threads, thread)
end

function init(args)
   codes = {}
end

function response(status, headers, body)
   codes[status] = (codes[status] or 0) + 1
end

function done(summary, latency, requests)
   local e = summary.errors
   io.write(string.format("WRKSUM %d %d %d %d %d %d\n", summary.duration,
      summary.requests, e.connect, e.read, e.write, e.timeout))
   local all = {}
   for _, t in ipairs(threads) do
      local c = t:get("codes")
      if c then
         for k, v in pairs(c) do
            all[k] = (all[k] or 0) + v
         end
      end
   end
   for k, v in pairs(all) do
      io.write(string.format("STATUS %d %d\n", k, v))
   end
end
