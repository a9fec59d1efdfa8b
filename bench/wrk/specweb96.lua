-- SPECweb96-like file-size mix for wrk.
--
-- The document root made by bench/bench.py holds /spec/classC_F.html for
-- class C = 0..3 and file F = 1..9, of F x 102, F x 1024, F x 10240 and
-- F x 102400 bytes. Requests pick a class with SPECweb96's weights (35% under
-- 1 KiB, 50% 1-10 KiB, 14% 10-100 KiB, 1% 100 KiB-1 MiB) and then a file within
-- the class with the weights below, peaked at the middle file. bench.py uses
-- the same tables to compute the expected bytes per request.

local class_weights = { 35, 50, 14, 1 }
local file_weights = { 39, 59, 88, 177, 353, 118, 71, 50, 45 }  -- per mille

local paths, cumulative = {}, {}

local function build()
   local total = 0
   for c = 1, #class_weights do
      for f = 1, #file_weights do
         total = total + class_weights[c] * file_weights[f]
         paths[#paths + 1] = string.format("/spec/class%d_%d.html", c - 1, f)
         cumulative[#cumulative + 1] = total
      end
   end
   for i = 1, #cumulative do
      cumulative[i] = cumulative[i] / total
   end
end

local requests = {}

function init(args)
   build()
   math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)") or "0", 16) % 100000)
   for i = 1, #paths do
      requests[i] = wrk.format("GET", paths[i])
   end
end

function request()
   local r = math.random()
   local lo, hi = 1, #cumulative
   while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if cumulative[mid] < r then lo = mid + 1 else hi = mid end
   end
   return requests[lo]
end

-- Totals line (same as report.lua; wrk takes a single script).
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(here .. "report.lua")
