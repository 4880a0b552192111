// Package examples holds runnable pipelines with their own small data; its tests run them end to end.
package examples
