-- wrk script for bench/run.sh: every request is a POST with an empty body
-- (Content-Length: 0) to the path given on the wrk command line. Counts the
-- responses by HTTP status in each thread and prints, when wrk is done:
--   WRKSUM <duration_us> <requests> <connect> <read> <write> <timeout> errors
--   STATUS <code> <count>       (one line per status seen)
wrk.method = "POST"
wrk.body = ""

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
