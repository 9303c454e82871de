-- wrk script: the "burst" scenario with a function tool and model gpt-5.4 (chat over the Responses
-- API, issue 29: cost_pairs.py --features chat_over_responses).
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local common = dofile(dir .. "common.lua")
common.setup("burst", "tools_stream.json")
done = common.done
