package kit

import (
	"fmt"
	"reflect"
	"strconv"
	"time"
)

// DefaultTags sets each zero or negative field of the struct opts points to
// from its `default` tag: a string, an integer, a float or a duration
// ("10s"). Fields without the tag are left alone. A tag that does not
// parse as its field's kind panics (a programming error):
//
//	type Options struct {
//		Namespace string        `default:"sluice"`
//		Buffer    int           `default:"4"`
//		Timeout   time.Duration `default:"10s"`
//	}
func DefaultTags(opts any) {
	v := reflect.ValueOf(opts).Elem()
	for i := range v.NumField() {
		def, ok := v.Type().Field(i).Tag.Lookup("default")
		if !ok {
			continue
		}
		if err := setDefault(v.Field(i), def); err != nil {
			panic(fmt.Sprintf("kit.DefaultTags: field %s: %v", v.Type().Field(i).Name, err))
		}
	}
}

var durationType = reflect.TypeFor[time.Duration]()

func setDefault(f reflect.Value, def string) error {
	switch {
	case f.Kind() == reflect.String:
		if f.String() == "" {
			f.SetString(def)
		}
	case f.Type() == durationType:
		d, err := time.ParseDuration(def)
		if err == nil && f.Int() <= 0 {
			f.SetInt(int64(d))
		}
		return err
	case f.CanInt():
		n, err := strconv.ParseInt(def, 10, f.Type().Bits())
		if err == nil && f.Int() <= 0 {
			f.SetInt(n)
		}
		return err
	case f.CanFloat():
		x, err := strconv.ParseFloat(def, f.Type().Bits())
		if err == nil && f.Float() <= 0 {
			f.SetFloat(x)
		}
		return err
	default:
		return fmt.Errorf("a default tag on a %s", f.Type())
	}
	return nil
}
