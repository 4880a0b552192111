package dsl

import "reflect"

// Redacted returns a deep copy of v in which every string (struct fields
// that can be set, elements of slices, arrays and maps, map keys, values
// behind pointers and interfaces) is redacted (Redact). Encode the copy:
// redacting after JSON or HTML escaping misses a secret whose escaped form
// differs from its text (a secret with ", &, <, ' or \ in it). Values of
// other kinds, and unexported fields, are copied as they are.
func (w *Workspace) Redacted(v any) any {
	if !w.HasSecrets() || v == nil {
		return v
	}
	return redactValue(reflect.ValueOf(v), w.secrets).Interface()
}

func redactValue(v reflect.Value, s *secrets) reflect.Value {
	switch v.Kind() {
	case reflect.String:
		out := reflect.New(v.Type()).Elem()
		out.SetString(s.redact(v.String()))
		return out
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		out := reflect.New(v.Type().Elem())
		out.Elem().Set(redactValue(v.Elem(), s))
		return out
	case reflect.Interface:
		if v.IsNil() {
			return v
		}
		out := reflect.New(v.Type()).Elem()
		out.Set(redactValue(v.Elem(), s))
		return out
	case reflect.Struct:
		out := reflect.New(v.Type()).Elem()
		out.Set(v)
		for i := range v.NumField() {
			if f := out.Field(i); f.CanSet() {
				f.Set(redactValue(v.Field(i), s))
			}
		}
		return out
	case reflect.Slice:
		if v.IsNil() || v.Type().Elem().Kind() == reflect.Uint8 {
			return v // bytes (json.RawMessage): not text rewind made
		}
		out := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			out.Index(i).Set(redactValue(v.Index(i), s))
		}
		return out
	case reflect.Array:
		out := reflect.New(v.Type()).Elem()
		for i := range v.Len() {
			out.Index(i).Set(redactValue(v.Index(i), s))
		}
		return out
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		out := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			out.SetMapIndex(redactValue(it.Key(), s), redactValue(it.Value(), s))
		}
		return out
	}
	return v
}
