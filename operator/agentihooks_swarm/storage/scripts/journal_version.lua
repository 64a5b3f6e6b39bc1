-- The journal entry's version, read without parsing the whole entry when it comes first (as
-- records.dump writes it), else from the parsed entry; an entry without one is version 0.
local function version_of(entry)
  local found = string.match(entry, '^{"version":(%d+)[,}]')
  if found then return tonumber(found) end
  local ok, decoded = pcall(cjson.decode, entry)
  if ok and type(decoded) == 'table' and type(decoded['version']) == 'number' then
    return decoded['version']
  end
  return 0
end
