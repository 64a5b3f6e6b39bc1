-- owner_uid(owner): the Execution UID in an owner claim (records.Owner as JSON), '' when none.
local function owner_uid(owner)
  if not owner then return '' end
  local ok, decoded = pcall(cjson.decode, owner)
  if ok and type(decoded) == 'table' and type(decoded['uid']) == 'string' then return decoded['uid'] end
  return ''
end
